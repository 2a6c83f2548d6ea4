#!/usr/bin/env python3
"""Validates a PGXN META.json against the PGXN Meta Spec v1.0.0.

    meta_check.py META.json [--control pg_lease.control]

The spec's rules, field by field as PGXN::Meta::Validator (which PGXN
Manager runs on upload) applies them: the required fields (name, abstract,
maintainer, license, provides, version, meta-spec) and their types; terms
(at least two characters, no whitespace, control characters, / or \\);
semantic versions (SemVer 2.0.0); version ranges in prereqs; the licence
names the spec knows; tags (1 to 256 characters, no control characters,
/ or \\); URLs (a scheme and an authority); custom keys only as x_ or X_.
Debian has no package of the validator (apt-cache search pgxn finds only
pgxnclient), hence this one.

With --control, also what PGXN cannot know: the distribution is named
after the extension, provides that extension at pg_lease.control's
default_version, the version of the distribution is the same, and the
files named by provides exist beside META.json.  And for every *.control
in the tree beside META.json (pg_lease.control, pg_lease_router.control):
provides names that extension at the control file's default_version,
provides names no extension without a control file, and every extension a
control file `requires` is provided here or is a runtime prerequisite
(requires, recommends or suggests).

Prints one line per problem; exits 1 when there is any, 0 otherwise.
"""
import json
import os
import re
import sys

SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
    r"(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")
LICENSES = {
    "agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd",
    "freebsd", "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1",
    "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5",
    "postgresql", "qpl_1_0", "ssleay", "sun", "zlib", "open_source",
    "restricted", "unrestricted", "unknown",
}
PHASES = {"configure", "build", "test", "runtime", "develop"}
RELATIONS = {"requires", "recommends", "suggests", "conflicts"}
RELEASE_STATUS = {"stable", "testing", "unstable"}


class Checker:
    def __init__(self):
        self.errors = []

    def error(self, path, message):
        self.errors.append("/%s: %s" % ("/".join(path), message))

    # --- value checks ------------------------------------------------------
    def string(self, path, v):
        if not isinstance(v, str) or v == "":
            self.error(path, "must be a non-empty string")
            return False
        return True

    def term(self, path, v):
        if not self.string(path, v):
            return
        if len(v) < 2 or re.search(r"[\s\x00-\x1f\x7f/\\]", v):
            self.error(path, '"%s" is not a valid term (2 or more characters, '
                       'no whitespace, control characters, / or \\)' % v)

    def tag(self, path, v):
        if not self.string(path, v):
            return
        if len(v) > 256 or re.search(r"[\x00-\x1f\x7f/\\]", v):
            self.error(path, '"%s" is not a valid tag (1 to 256 characters, '
                       'no control characters, / or \\)' % v)

    def version(self, path, v):
        if not isinstance(v, str) or not SEMVER.match(v):
            self.error(path, "%s is not a valid semantic version" % json.dumps(v))

    def version_range(self, path, v):
        if not isinstance(v, (str, int)) or str(v) == "":
            self.error(path, "%s is not a version range" % json.dumps(v))
            return
        for part in re.split(r",\s*", str(v)):
            if part == "0":
                continue
            m = re.match(r"^(<=|>=|==|!=|<|>)?\s*(.*)$", part)
            if not m.group(2) or not SEMVER.match(m.group(2)):
                self.error(path, '"%s" is not a valid version range' % part)

    def url(self, path, v):
        if not self.string(path, v):
            return
        if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]+", v):
            self.error(path, '"%s" is not a valid URL' % v)

    def custom_key(self, path, key):
        if not re.match(r"^x_", key, re.I):
            self.error(path + [key], "unknown key; custom keys must begin with x_ or X_")
            return False
        return True

    def string_list(self, path, v, each):
        """A list of values, or a single value standing for a list of one."""
        if isinstance(v, list):
            if not v:
                self.error(path, "must not be an empty list")
            for i, item in enumerate(v):
                each(path[:-1] + ["%s[%d]" % (path[-1], i)], item)
        else:
            each(path, v)

    def mapping(self, path, v):
        if not isinstance(v, dict):
            self.error(path, "must be a map")
            return False
        return True

    # --- the structure -------------------------------------------------------
    def meta(self, d):
        if not self.mapping([], d):
            return
        required = ["name", "abstract", "maintainer", "license", "provides",
                    "version", "meta-spec"]
        for key in required:
            if key not in d:
                self.error([key], "required field missing")
        fields = {
            "name": self.term,
            "abstract": self.string,
            "description": self.string,
            "generated_by": self.string,
            "version": self.version,
            "maintainer": lambda p, v: self.string_list(p, v, self.string),
            "license": self.license,
            "meta-spec": self.meta_spec,
            "provides": self.provides,
            "prereqs": self.prereqs,
            "release_status": self.release_status,
            "resources": self.resources,
            "no_index": self.no_index,
            "tags": lambda p, v: self.string_list(p, v, self.tag),
        }
        for key, value in d.items():
            if key in fields:
                fields[key]([key], value)
            else:
                self.custom_key([], key)

    def license(self, path, v):
        if isinstance(v, dict):
            if not v:
                self.error(path, "must not be an empty map")
            for name, link in v.items():
                self.url(path + [name], link)
            return

        def one(p, name):
            if name not in LICENSES:
                self.error(p, "%s is an unknown license" % json.dumps(name))
        self.string_list(path, v, one)

    def meta_spec(self, path, v):
        if not self.mapping(path, v):
            return
        if "version" not in v:
            self.error(path + ["version"], "required field missing")
        elif v["version"] != "1.0.0":
            self.error(path + ["version"], "%s: only spec 1.0.0 is known" % json.dumps(v["version"]))
        for key, value in v.items():
            if key == "url":
                self.url(path + [key], value)
            elif key != "version":
                self.custom_key(path, key)

    def provides(self, path, v):
        if not self.mapping(path, v):
            return
        if not v:
            self.error(path, "must name at least one extension")
        for ext, info in v.items():
            p = path + [ext]
            self.term(p, ext)
            if not self.mapping(p, info):
                continue
            for key in ("file", "version"):
                if key not in info:
                    self.error(p + [key], "required field missing")
            for key, value in info.items():
                if key in ("file", "docfile"):
                    self.string(p + [key], value)
                elif key == "version":
                    self.version(p + [key], value)
                elif key == "abstract":
                    self.string(p + [key], value)
                else:
                    self.custom_key(p, key)

    def prereqs(self, path, v):
        if not self.mapping(path, v):
            return
        for phase, relations in v.items():
            p = path + [phase]
            if phase not in PHASES and not re.match(r"^x_", phase, re.I):
                self.error(p, "unknown prereq phase; must be one of " + ", ".join(sorted(PHASES)))
            if not self.mapping(p, relations):
                continue
            for relation, terms in relations.items():
                q = p + [relation]
                if relation not in RELATIONS and not re.match(r"^x_", relation, re.I):
                    self.error(q, "unknown prereq relationship; must be one of " + ", ".join(sorted(RELATIONS)))
                if not self.mapping(q, terms):
                    continue
                for name, rng in terms.items():
                    self.term(q + [name], name)
                    self.version_range(q + [name], rng)

    def release_status(self, path, v):
        if v not in RELEASE_STATUS:
            self.error(path, "%s: must be one of stable, testing, unstable" % json.dumps(v))

    def resources(self, path, v):
        if not self.mapping(path, v):
            return
        for key, value in v.items():
            p = path + [key]
            if key == "homepage":
                self.url(p, value)
            elif key == "license":
                self.string_list(p, value, self.url)
            elif key in ("bugtracker", "repository"):
                if not self.mapping(p, value):
                    continue
                for k, val in value.items():
                    if k in ("web", "url"):
                        self.url(p + [k], val)
                    elif key == "bugtracker" and k == "mailto":
                        if not isinstance(val, str) or "@" not in val:
                            self.error(p + [k], "%s is not an email address" % json.dumps(val))
                    elif key == "repository" and k == "type":
                        if self.string(p + [k], val) and val != val.lower():
                            self.error(p + [k], '"%s" is not lower case' % val)
                    else:
                        self.custom_key(p, k)
            else:
                self.custom_key(path, key)

    def no_index(self, path, v):
        if not self.mapping(path, v):
            return
        for key, value in v.items():
            if key in ("file", "directory"):
                self.string_list(path + [key], value, self.string)
            else:
                self.custom_key(path, key)


def control_setting(control, name):
    """A setting of an extension control file, or None."""
    with open(control, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*%s\s*=\s*'([^']*)'" % re.escape(name), line)
            if m:
                return m.group(1)
    return None


def control_version(control):
    return control_setting(control, "default_version")


# Directories of the work tree that are not the distribution's: version
# control, build output, test clusters and results, installed npm modules.
SKIP_DIRS = {"build", "node_modules", "results", "output_iso", "log"}


def tree_controls(base):
    """Every extension control file in the tree under base, relative paths."""
    found = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "tmp_check"))
                             and d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".control"):
                found.append(os.path.relpath(os.path.join(dirpath, name), base))
    return found


def project(c, d, meta_path, control):
    """pg_lease's own rules, beyond the spec."""
    ext = os.path.basename(control)[:-len(".control")]
    want = control_version(control)
    base = os.path.dirname(os.path.abspath(meta_path))
    if want is None:
        c.error([], "%s has no default_version" % control)
    if d.get("name") != ext:
        c.error(["name"], "%s: the distribution is named after the extension, %s"
                % (json.dumps(d.get("name")), ext))
    provides = d.get("provides") if isinstance(d.get("provides"), dict) else {}
    info = provides.get(ext)
    if not isinstance(info, dict):
        c.error(["provides", ext], "the extension %s is not provided" % ext)
        info = {}
    for path, got in ((["version"], d.get("version")),
                      (["provides", ext, "version"], info.get("version"))):
        if got != want:
            c.error(path, "%s, but %s's default_version is %s"
                    % (json.dumps(got), os.path.basename(control), json.dumps(want)))
    for ext_name, i in provides.items():
        if not isinstance(i, dict):
            continue
        for key in ("file", "docfile"):
            f = i.get(key)
            if isinstance(f, str) and not os.path.isfile(os.path.join(base, f)):
                c.error(["provides", ext_name, key], '"%s" does not exist' % f)
    runtime = d.get("prereqs")
    runtime = runtime.get("runtime") if isinstance(runtime, dict) else None
    runtime = runtime if isinstance(runtime, dict) else {}
    required = runtime.get("requires")
    if not isinstance(required, dict) or "PostgreSQL" not in required:
        c.error(["prereqs", "runtime", "requires", "PostgreSQL"], "the PostgreSQL version required is missing")
    prereqs = set()
    for relation in ("requires", "recommends", "suggests"):
        if isinstance(runtime.get(relation), dict):
            prereqs.update(runtime[relation])

    # Every extension in the tree is provided, at its version; nothing else is.
    controls = {}
    for rel in tree_controls(base):
        controls.setdefault(os.path.basename(rel)[:-len(".control")], rel)
    for name, rel in sorted(controls.items()):
        path = os.path.join(base, rel)
        info = provides.get(name)
        if not isinstance(info, dict):
            c.error(["provides", name], "the extension %s (%s) is not provided" % (name, rel))
            continue
        got, want = info.get("version"), control_version(path)
        if got != want:
            c.error(["provides", name, "version"], "%s, but %s's default_version is %s"
                    % (json.dumps(got), rel, json.dumps(want)))
        for dep in re.split(r"[\s,]+", control_setting(path, "requires") or ""):
            if dep and dep not in provides and dep not in prereqs:
                c.error(["prereqs", "runtime"], "%s requires the extension %s, which is neither "
                        "provided nor a runtime prerequisite" % (rel, dep))
    for name in provides:
        if name not in controls:
            c.error(["provides", name], "no %s.control in the distribution" % name)


def main(argv):
    args = argv[1:]
    control = None
    if "--control" in args:
        i = args.index("--control")
        control = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    meta_path = args[0]
    try:
        with open(meta_path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        print("%s: %s" % (meta_path, e))
        return 1
    c = Checker()
    c.meta(d)
    if control is not None:
        project(c, d, meta_path, control)
    for e in c.errors:
        print("%s: %s" % (meta_path, e))
    return 1 if c.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
