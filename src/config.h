/*-------------------------------------------------------------------------
 *
 * config.h
 *	  pg_lease's GUCs (lease.*), defined in _PG_init.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_CONFIG_H
#define LEASE_CONFIG_H

/* lease.default_lease_duration: milliseconds, used when lease_duration is NULL */
extern int	lease_default_lease_duration_ms;

extern void lease_define_gucs(void);

#endif							/* LEASE_CONFIG_H */
