/*-------------------------------------------------------------------------
 *
 * rotation.h
 *	  Channel rotation (rotate_channel) and its post-commit compensator
 *	  (restore_rotated_channel, retry_failed_compensations).
 *
 * The SQL-callable functions are declared by PG_FUNCTION_INFO_V1 in
 * rotation.c; nothing else is shared.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_ROTATION_H
#define LEASE_ROTATION_H

#include "fmgr.h"

extern Datum lease_rotate_channel(PG_FUNCTION_ARGS);
extern Datum lease_restore_rotated_channel(PG_FUNCTION_ARGS);
extern Datum lease_retry_failed_compensations(PG_FUNCTION_ARGS);

#endif							/* LEASE_ROTATION_H */
