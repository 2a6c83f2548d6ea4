/*-------------------------------------------------------------------------
 *
 * src/bindings/subxact.c
 *	  Running a step in an internal subtransaction, and catching its error.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "bindings/subxact.h"

/* Runs a step in an internal subtransaction; see subxact.h. */
BindingSubxactResult
binding_subxact_run(BindingSubxactStep step, void *arg, ErrorData **error)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool keep = false;
	ErrorData  *volatile caught = NULL;

	*error = NULL;
	BeginInternalSubTransaction(NULL);
	/* Run the step in the caller's context, not the subtransaction's. */
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		keep = step(arg);
	}
	PG_CATCH();
	{
		/* Copy the error out before the subtransaction's memory goes. */
		MemoryContextSwitchTo(oldcontext);
		caught = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_END_TRY();

	if (caught != NULL)
	{
		*error = caught;
		return BINDING_SUBXACT_ERROR;
	}

	if (keep)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(oldcontext);
	CurrentResourceOwner = oldowner;
	return keep ? BINDING_SUBXACT_KEPT : BINDING_SUBXACT_UNDONE;
}
