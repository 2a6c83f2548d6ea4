#!/bin/sh
# Builds the Java client offline, from Debian's packages only (default-jdk-headless,
# libpostgresql-jdbc-java; junit5 for --tests): no Maven, nothing downloaded.
#
#   build.sh [--tests]
#
# Writes build/pg-lease-VERSION.jar (the org.pglease package; VERSION is pg_lease's,
# from pg_lease.control; its manifest puts Debian's /usr/share/java/postgresql.jar on
# the class path), build/examples/ (ExampleWorker, compiled against the jar) and, with
# --tests, build/test-classes/ (the JUnit 5 tests, run by test/clients/java.sh).
set -eu
cd "$(dirname "$0")"
JDK=${JAVA_HOME:-/usr/lib/jvm/default-java}
JDBC=/usr/share/java/postgresql.jar
JUNIT=/usr/share/java/junit-platform-console-standalone.jar
VERSION=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" ../../pg_lease.control)
JAR=build/pg-lease-$VERSION.jar
# C1 only and the serial collector: half the CPU of a default javac for a build this small
FAST="-J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC"
JAVAC="$JDK/bin/javac $FAST -Xlint:all -Werror --release 17 -encoding UTF-8"

rm -rf build/classes build/examples build/test-classes "$JAR"
mkdir -p build/classes build/examples
$JAVAC -cp "$JDBC" -d build/classes src/main/java/org/pglease/*.java
cat >build/MANIFEST.MF <<MF
Automatic-Module-Name: org.pglease
Implementation-Title: pg_lease worker
Implementation-Version: $VERSION
Class-Path: $JDBC
MF
"$JDK/bin/jar" $FAST --create --file "$JAR" --manifest build/MANIFEST.MF -C build/classes .
$JAVAC -cp "$JAR:$JDBC" -d build/examples examples/ExampleWorker.java
if [ "${1:-}" = --tests ]; then
    mkdir -p build/test-classes
    # the tests stop their workers in try-with-resources (close() may be interrupted)
    $JAVAC -Xlint:-try -cp "$JAR:$JDBC:$JUNIT" -d build/test-classes src/test/java/org/pglease/*.java
fi
echo "$JAR"
