/*-------------------------------------------------------------------------
 *
 * taker.h
 *	  The server-side lease taker: take_leases (one balancing round for one
 *	  worker), renew_leases (batch renewal) and request_handoff.
 *
 * The SQL-callable functions are found by the function manager through
 * PG_FUNCTION_INFO_V1; nothing else in the module calls into the taker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_TAKER_H
#define LEASE_TAKER_H

#include "fmgr.h"

extern Datum lease_take_leases(PG_FUNCTION_ARGS);
extern Datum lease_renew_leases(PG_FUNCTION_ARGS);
extern Datum lease_request_handoff(PG_FUNCTION_ARGS);

#endif							/* LEASE_TAKER_H */
