/*-------------------------------------------------------------------------
 *
 * src/bindings/subxact.h
 *	  Running a step in an internal subtransaction, and catching its error.
 *
 * This is what PL/pgSQL's BEGIN ... EXCEPTION block does (pl_exec.c,
 * exec_stmt_block): the step runs in a subtransaction; if it raises, the
 * error is copied out, the subtransaction is rolled back (undoing its writes,
 * releasing its row and advisory locks, restoring GUCs it set), and the
 * caller decides what the error means.  A step can also ask for a rollback
 * without raising, which is how a function undoes its partial work and still
 * returns normally.
 *
 * SPI may be connected before the call; SPI calls inside the step are fine
 * (AtEOSubXact_SPI cleans up after an aborted one).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BINDING_SUBXACT_H
#define BINDING_SUBXACT_H

#include "utils/elog.h"

/* What happened to the subtransaction. */
typedef enum BindingSubxactResult
{
	BINDING_SUBXACT_KEPT,			/* the step returned true: released (committed) */
	BINDING_SUBXACT_UNDONE,		/* the step returned false: rolled back */
	BINDING_SUBXACT_ERROR			/* the step raised: rolled back, error copied */
} BindingSubxactResult;

/* A step: true keeps its work, false rolls it back. */
typedef bool (*BindingSubxactStep) (void *arg);

/*
 * Runs step(arg) in an internal subtransaction.  On BINDING_SUBXACT_ERROR,
 * *error is the copied error (in the caller's memory context); the caller
 * must act on the SQLSTATEs it expects and ReThrowError() anything else.
 * The caller's memory context and resource owner are restored in every case.
 */
extern BindingSubxactResult binding_subxact_run(BindingSubxactStep step, void *arg,
											ErrorData **error);

#endif							/* BINDING_SUBXACT_H */
