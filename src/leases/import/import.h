/*-------------------------------------------------------------------------
 *
 * src/leases/import/import.h
 *	  What the importers (kcl_ex.c, kcl_dynamodb.c) share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_IMPORT_H
#define LEASE_IMPORT_H

/*
 * Raises 42501 unless the caller may insert into lease.shard_leases
 * (INSERT ... ON CONFLICT, which needs SELECT too).  Row-level security on
 * lease.shard_leases (the operator's own apps) is applied by the insert.
 */
extern void lease_import_check_leases_privileges(const char *fname);

#endif							/* LEASE_IMPORT_H */
