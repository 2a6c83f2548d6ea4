-- Session settings shared by catalog.sql and rows.sql (\ir): bare lines, no
-- headers, and output that depends on no setting of the caller's session
-- (names printed schema-qualified, fixed date, interval and float formats).
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
SET search_path = '';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
SET TimeZone = 'UTC';
SET extra_float_digits = 1;
