/*-------------------------------------------------------------------------
 *
 * src/common/args.c
 *	  Argument checks shared by every SQL-callable pg_lease function.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

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

/* Checks a text value against the non-blank, bounded-length rule. */
static void
check_bounded_text(text *value, const char *name, int limit)
{
	int			len = VARSIZE_ANY_EXHDR(value);

	if (len == 0 || is_blank(VARDATA_ANY(value), len))
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

/* A required checkpoint argument. */
Datum
lease_arg_checkpoint(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_not_null(fcinfo, argno, name);
	check_bounded_text(PG_GETARG_TEXT_PP(argno), name, LEASE_MAX_CHECKPOINT_BYTES);
	return PointerGetDatum(PG_GETARG_TEXT_PP(argno));
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
 * A required interval argument that must not be negative, nor longer than
 * LEASE_MAX_AGE_YEARS (any timestamp minus a longer one would be out of
 * range, 22008, which is not an error the caller can read).
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
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", name),
				 errdetail("The value given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, value))),
				 errhint("Pass an interval of zero or more, e.g. '7 days'.")));
	limit->month = LEASE_MAX_AGE_YEARS * MONTHS_PER_YEAR;
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, value, IntervalPGetDatum(limit))) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", name),
				 errdetail("The value given is %s; the limit is %d years.",
						   DatumGetCString(DirectFunctionCall1(interval_out, value)),
						   LEASE_MAX_AGE_YEARS),
				 errhint("Pass at most %d years.", LEASE_MAX_AGE_YEARS)));
	return value;
}

/* A lease duration argument, defaulting to lease.default_lease_duration. */
Datum
lease_arg_duration(FunctionCallInfo fcinfo, int argno, const char *name)
{
	Datum		value;
	Datum		zero;
	Datum		limit;

	if (PG_ARGISNULL(argno))
		return IntervalPGetDatum(interval_from_ms(lease_default_lease_duration_ms));

	value = PG_GETARG_DATUM(argno);
	zero = IntervalPGetDatum(interval_from_ms(0));
	limit = IntervalPGetDatum(interval_from_ms((int64) LEASE_MAX_DURATION_MS));

	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, value, zero)) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", name),
				 errdetail("The value given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, value))),
				 errhint("Pass a positive interval, or NULL for lease.default_lease_duration.")));
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp, value, limit)) > 0)
	{
		char	   *limit_text = DatumGetCString(DirectFunctionCall1(interval_out, limit));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", name),
				 errdetail("The value given is %s; the limit is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, value)), limit_text),
				 errhint("Pass at most %s; a worker renews a lease long before it expires.",
						 limit_text)));
	}
	return value;
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

	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	if (nelems > LEASE_MAX_PARENTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has too many elements", name),
				 errdetail("It has %d elements; the limit is %d.", nelems, LEASE_MAX_PARENTS),
				 errhint("A shard has at most %d parents; pass only its direct parents.", LEASE_MAX_PARENTS)));
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
