# shellcheck shell=bash
# TAP output for the script suites that count their own checks (packaging,
# clients, monitoring).  Source it, then call `ok STATUS DESCRIPTION` once
# per check (STATUS 0 passes) and print "1..$n" at the end; $fails counts
# the failures.
n=0
fails=0

# Prints one TAP line for a check.
ok() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        fails=$((fails + 1))
    fi
}

# A multi-line value on one line, for a TAP description.
oneline() {
    tr '\n' ' ' <<<"$1" | sed 's/ *$//'
}

# `ok STATUS DESCRIPTION`, and when the check failed the last lines ($4,
# default 20) of the file $3 as TAP comments: what explains the failure.
ok_show() {
    ok "$1" "$2"
    [ "$1" = 0 ] || sed 's/^/#   /' "$3" | tail -n "${4:-20}"
}
