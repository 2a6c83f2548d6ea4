/*-------------------------------------------------------------------------
 *
 * src/common/args.c
 *	  Argument checks shared by every SQL-callable pg_lease function.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "parser/scansup.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/timestamp.h"

#include "common/args.h"
#include "common/config.h"

/* Raises 22004 naming the argument when it is NULL. */
static void
require_not_null(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name),
				 errhint("Pass a value for %s.", name)));
}

/* True when every byte of the value is ASCII white space (or there are none). */
static bool
is_blank(const char *s, int len)
{
	for (int i = 0; i < len; i++)
	{
		if (!scanner_isspace(s[i]))
			return false;
	}
	return true;
}

/*
 * Checks a text value against the non-blank, bounded-length rule.  A value
 * over the limit is too long whatever it holds: it is never scanned.
 */
static void
check_bounded_text(text *value, const char *name, int limit)
{
	int			len = VARSIZE_ANY_EXHDR(value);

	if (len == 0 || (len <= limit && is_blank(VARDATA_ANY(value), len)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty or blank", name),
				 len == 0 ? errdetail("The value is empty.")
				 : errdetail("The value is %d bytes of white space.", len),
				 errhint("Pass the %s itself; white space alone names nothing.", name)));
	if (len > limit)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", name),
				 errdetail("The value is %d bytes; the limit is %d bytes.", len, limit),
				 errhint("Pass a %s of at most %d bytes (a longer name can be shortened to a hash of it).", name, limit)));
}

/* Checks one identifier value. */
void
lease_check_ident(text *value, const char *name)
{
	check_bounded_text(value, name, LEASE_MAX_IDENT_BYTES);
}

/* A required identifier argument. */
Datum
lease_arg_ident(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_not_null(fcinfo, argno, name);
	lease_check_ident(PG_GETARG_TEXT_PP(argno), name);
	return PointerGetDatum(PG_GETARG_TEXT_PP(argno));
}

/* An optional identifier argument; false when NULL. */
bool
lease_arg_opt_ident(FunctionCallInfo fcinfo, int argno, const char *name, Datum *value)
{
	if (PG_ARGISNULL(argno))
		return false;
	lease_check_ident(PG_GETARG_TEXT_PP(argno), name);
	*value = PointerGetDatum(PG_GETARG_TEXT_PP(argno));
	return true;
}

/* Checks one checkpoint value; used by lease_arg_checkpoint and for array elements. */
void
lease_check_checkpoint(text *value, const char *name)
{
	check_bounded_text(value, name, LEASE_MAX_CHECKPOINT_BYTES);
}

/* A required checkpoint argument. */
Datum
lease_arg_checkpoint(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_not_null(fcinfo, argno, name);
	lease_check_checkpoint(PG_GETARG_TEXT_PP(argno), name);
	return PointerGetDatum(PG_GETARG_TEXT_PP(argno));
}

/* Raises 22023 when a checkpoint a worker writes would end the shard. */
void
lease_check_not_shard_end(Datum checkpoint)
{
	if (strcmp(TextDatumGetCString(checkpoint), LEASE_CHECKPOINT_SHARD_END) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("checkpoint SHARD_END can only be written by close_shard"),
				 errhint("Call lease.close_shard() to end a shard; it also releases the lease.")));
}

/* A required OID-valued argument (regrole, regclass...). */
Oid
lease_arg_oid(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_not_null(fcinfo, argno, name);
	return PG_GETARG_OID(argno);
}

/* A required bigint argument. */
int64
lease_arg_int64(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_not_null(fcinfo, argno, name);
	return PG_GETARG_INT64(argno);
}

/* A required non-negative bigint argument. */
int64
lease_arg_nonneg_int64(FunctionCallInfo fcinfo, int argno, const char *name)
{
	int64		value = lease_arg_int64(fcinfo, argno, name);

	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", name),
				 errdetail("The value given is " INT64_FORMAT ".", value),
				 errhint("Pass zero or more for %s.", name)));
	return value;
}

/* A required non-negative integer argument. */
int32
lease_arg_nonneg_int32(FunctionCallInfo fcinfo, int argno, const char *name)
{
	int32		value;

	require_not_null(fcinfo, argno, name);
	value = PG_GETARG_INT32(argno);
	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", name),
				 errdetail("The value given is %d.", value),
				 errhint("Pass zero or more for %s.", name)));
	return value;
}

/* An optional positive integer argument; false when NULL. */
bool
lease_arg_opt_positive_int32(FunctionCallInfo fcinfo, int argno, const char *name,
							 int32 *value)
{
	if (PG_ARGISNULL(argno))
		return false;
	*value = PG_GETARG_INT32(argno);
	if (*value <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive or null", name),
				 errdetail("The value given is %d.", *value),
				 errhint("Pass NULL for no limit.")));
	return true;
}

/* Builds an interval of the given number of milliseconds. */
static Interval *
interval_from_ms(int64 ms)
{
	Interval   *result = (Interval *) palloc0(sizeof(Interval));

	result->time = ms * INT64CONST(1000);
	return result;
}

/* An interval Datum of the given number of milliseconds. */
Datum
lease_interval_from_ms(int64 ms)
{
	return IntervalPGetDatum(interval_from_ms(ms));
}

/*
 * True when no part of the interval (months, days, time) alone is longer
 * than LEASE_MAX_AGE_YEARS, so that a timestamp plus or minus it, the parts
 * applied one after the other, stays in range (never 22008) whatever the
 * parts add up to.
 */
static bool
parts_bounded(const Interval *value)
{
	int64		max_days = (int64) LEASE_MAX_AGE_YEARS * 366;

	return Abs((int64) value->month) <= (int64) LEASE_MAX_AGE_YEARS * MONTHS_PER_YEAR &&
		Abs((int64) value->day) <= max_days &&
		value->time <= max_days * USECS_PER_DAY && value->time >= -max_days * USECS_PER_DAY;
}

/*
 * now() + value, or now() - value when `minus`: what the value means to the
 * statements that use it, months and days taken on the calendar of the
 * session's time zone.  The value's parts must be bounded (parts_bounded).
 */
static TimestampTz
shift_now(Datum value, bool minus)
{
	return DatumGetTimestampTz(DirectFunctionCall2(minus ? timestamptz_mi_interval
												   : timestamptz_pl_interval,
												   TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
												   value));
}

/* The interval as text, for error details. */
static char *
interval_text(Datum value)
{
	return DatumGetCString(DirectFunctionCall1(interval_out, value));
}

/* Raises 22023: the interval argument is shorter than allowed. */
static pg_attribute_noreturn() void
refuse_short_interval(const char *name, Datum value, bool zero_allowed)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 zero_allowed ? errmsg("%s must not be negative", name)
			 : errmsg("%s must be positive", name),
			 errdetail("The value given is %s.", interval_text(value)),
			 zero_allowed ? errhint("Pass an interval of zero or more, e.g. '7 days'.")
			 : errhint("Pass a positive interval, or NULL for lease.default_lease_duration.")));
}

/* Raises 22023: the lease duration is longer than the limit. */
static pg_attribute_noreturn() void
refuse_long_duration(const char *name, Datum value, Datum limit)
{
	char	   *limit_text = interval_text(limit);

	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s is too long", name),
			 errdetail("The value given is %s; the limit is %s.", interval_text(value), limit_text),
			 errhint("Pass at most %s; a worker renews a lease long before it expires.",
					 limit_text)));
}

/*
 * A required interval argument that must not be negative, nor longer than
 * LEASE_MAX_AGE_YEARS (any timestamp minus a longer one would be out of
 * range, 22008, which is not an error the caller can read).  Both bounds
 * hold for now() - value, which is how the value is used, so parts that
 * cancel out ('120000 mon -3240000 days') are judged by what they add up
 * to on the calendar, and a part too long on its own is refused.
 */
Datum
lease_arg_nonneg_interval(FunctionCallInfo fcinfo, int argno, const char *name)
{
	Datum		value;
	Interval   *limit = (Interval *) palloc0(sizeof(Interval));

	require_not_null(fcinfo, argno, name);
	value = PG_GETARG_DATUM(argno);
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, value,
										  lease_interval_from_ms(0))) < 0)
		refuse_short_interval(name, value, true);
	limit->month = LEASE_MAX_AGE_YEARS * MONTHS_PER_YEAR;
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, value, IntervalPGetDatum(limit))) > 0 ||
		!parts_bounded(DatumGetIntervalP(value)) ||
		shift_now(value, true) < shift_now(IntervalPGetDatum(limit), true))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", name),
				 errdetail("The value given is %s; the limit is %d years, for the whole and for each of its months, days and time.",
						   interval_text(value), LEASE_MAX_AGE_YEARS),
				 errhint("Pass at most %d years.", LEASE_MAX_AGE_YEARS)));
	if (shift_now(value, true) > GetCurrentTransactionStartTimestamp())
		refuse_short_interval(name, value, true);
	return value;
}

/*
 * A lease duration argument, defaulting to lease.default_lease_duration.
 * It is refused unless now() + value is after now() and at most
 * LEASE_MAX_DURATION_MS later (or 7 calendar days: across a daylight-saving
 * change a day is 23 or 25 hours, and '7 days' stays accepted).  A month
 * part is refused: a month is 28 to 31 days, so a duration with one has no
 * fixed length, and the lease's length would depend on when it is taken or
 * handed over.
 */
Datum
lease_arg_duration(FunctionCallInfo fcinfo, int argno, const char *name)
{
	Datum		value;
	Datum		limit;
	Interval   *limit_days = (Interval *) palloc0(sizeof(Interval));
	TimestampTz expires;

	if (PG_ARGISNULL(argno))
		return IntervalPGetDatum(interval_from_ms(lease_default_lease_duration_ms));

	value = PG_GETARG_DATUM(argno);
	limit = IntervalPGetDatum(interval_from_ms((int64) LEASE_MAX_DURATION_MS));
	limit_days->day = LEASE_MAX_DURATION_MS / (SECS_PER_DAY * 1000);

	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, value, lease_interval_from_ms(0))) <= 0)
		refuse_short_interval(name, value, false);
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, value, limit)) > 0)
		refuse_long_duration(name, value, limit);
	if (DatumGetIntervalP(value)->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not contain months", name),
				 errdetail("The value given is %s; a month is 28 to 31 days, so a duration with months has no fixed length.",
						   interval_text(value)),
				 errhint("Pass the duration in days, hours, minutes or seconds.")));
	expires = parts_bounded(DatumGetIntervalP(value)) ? shift_now(value, false) : DT_NOEND;
	if (expires > shift_now(limit, false) &&
		expires > shift_now(IntervalPGetDatum(limit_days), false))
		refuse_long_duration(name, value, limit);
	if (expires <= GetCurrentTransactionStartTimestamp())
		refuse_short_interval(name, value, false);
	return value;
}

/*
 * An optional duration (renew_every): NULL passes (returns false);
 * otherwise checked as lease_arg_duration checks a lease duration.
 */
bool
lease_arg_opt_duration(FunctionCallInfo fcinfo, int argno, const char *name, Datum *value)
{
	if (PG_ARGISNULL(argno))
		return false;
	*value = lease_arg_duration(fcinfo, argno, name);
	return true;
}

/* A required one-dimensional text[] of identifiers without NULL elements. */
Datum
lease_arg_ident_array(FunctionCallInfo fcinfo, int argno, const char *name)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;

	require_not_null(fcinfo, argno, name);
	array = PG_GETARG_ARRAYTYPE_P(argno);

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", name),
				 errdetail("It has %d dimensions.", ARR_NDIM(array)),
				 errhint("Pass a flat list of shard ids, e.g. ARRAY['s-1', 's-2'].")));

	/* counted from the header, before anything is made per element */
	nelems = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
	if (nelems > LEASE_MAX_PARENTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has too many elements", name),
				 errdetail("It has %d elements; the limit is %d.", nelems, LEASE_MAX_PARENTS),
				 errhint("A shard has at most %d parents; pass only its direct parents.", LEASE_MAX_PARENTS)));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	for (int i = 0; i < nelems; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain null elements", name),
					 errdetail("Element %d is NULL.", i + 1),
					 errhint("Remove the NULL elements from %s.", name)));
		lease_check_ident(DatumGetTextPP(elems[i]), name);
	}
	return PointerGetDatum(array);
}
