/*-------------------------------------------------------------------------
 *
 * import.h
 *	  Switching a fleet over from another lease store: import_kcl_ex.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_IMPORT_H
#define LEASE_IMPORT_H

#include "fmgr.h"

extern Datum lease_import_kcl_ex(PG_FUNCTION_ARGS);

#endif							/* LEASE_IMPORT_H */
