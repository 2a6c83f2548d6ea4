/*-------------------------------------------------------------------------
 *
 * lineage.h
 *	  Shard lineage maintenance: cleanup_ended and delete_lease.
 *
 * The SQL-callable functions are found by the function manager through
 * PG_FUNCTION_INFO_V1; nothing else in the module calls them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_LINEAGE_H
#define LEASE_LINEAGE_H

#include "fmgr.h"

extern Datum lease_cleanup_ended(PG_FUNCTION_ARGS);
extern Datum lease_delete_lease(PG_FUNCTION_ARGS);

#endif							/* LEASE_LINEAGE_H */
