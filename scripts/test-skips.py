#!/usr/bin/env python3
"""List every test that was skipped, by name and reason, from ctest's JUnit files.

  scripts/test-skips.py [--forbid-skips] RUN=FILE.xml [RUN=FILE.xml ...]

RUN names a ctest run (release, gpu-fake, asan, tsan) and FILE the file its
`ctest --output-junit FILE --test-output-size-passed N` wrote. `make test` ends with this
table, because a skip otherwise reads as a pass: ctest counts a test that exits 77 among
the passed ones, and a cmocka case that calls skip() leaves its executable's exit status 0.

Found, per run:
  - a test ctest did not run (status notrun: exit 77, a missing executable): the reasons
    are its "EGM-SKIP: <what>: <reason>" lines, else ctest's own message;
  - a test that ran with skipped parts: each "EGM-SKIP:" line it printed (EGM_SKIP in the
    cmocka tests, tests/support/testutil.h; the pytest skips, tests/python/conftest.py), and
    each cmocka "[  SKIPPED ] <case>" that printed no EGM-SKIP line (a bare skip()).

Exit status 0; 1 with --forbid-skips when anything was skipped (the fake-driver pass: every
GPU test must run there); 2 when a file is missing or unreadable (that run did not happen).
"""

import re
import sys
import xml.etree.ElementTree as ET

SKIP_LINE = re.compile(r"^EGM-SKIP: (.*?): (.*)$")
CMOCKA_SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+)\s*$")


def skips_of(case):
    """[(case, reason)] of one <testcase>, or [] when nothing in it was skipped."""
    out = case.findtext("system-out") or ""
    lines = out.splitlines()
    notes = [m.groups() for m in map(SKIP_LINE.match, lines) if m]
    noted = {what for what, _ in notes}
    found = list(dict.fromkeys(notes))  # in order, once each
    if case.get("status") == "notrun":
        if found:
            return found
        skipped = case.find("skipped")
        why = skipped.get("message") if skipped is not None else "not run"
        return [("", f"{why} (the test printed no EGM-SKIP line)")]
    # cmocka prints each skipped case twice: when it ends and in the closing list
    bare = dict.fromkeys(m.group(1) for m in map(CMOCKA_SKIPPED.match, lines) if m)
    found += [(c, "bare cmocka skip(): no reason given (use EGM_SKIP)") for c in bare if c not in noted]
    return found


def main(argv):
    forbid = "--forbid-skips" in argv
    runs = [a for a in argv if a != "--forbid-skips"]
    if not runs or any("=" not in r for r in runs):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    rows, missing, counted = [], [], []
    for run in runs:
        name, path = run.split("=", 1)
        try:
            cases = ET.parse(path).getroot().iter("testcase")
        except (OSError, ET.ParseError) as e:
            missing.append(f"{name}: {path}: {e}")
            continue
        n = 0
        for case in cases:
            n += 1
            rows += [(name, case.get("name"), what, why) for what, why in skips_of(case)]
        counted.append(f"{name} ({n} tests)")
    for m in missing:
        print(f"test-skips: error: no results for run {m}", file=sys.stderr)
    if not rows:
        print(f"== skipped: nothing, in {', '.join(counted) or 'no run'}")
    else:
        head = ("run", "test", "case", "reason")
        widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(3)]
        print(f"== skipped: {len(rows)}, in {', '.join(counted)} (each is something `make test` did not check)")
        for r in [head] + rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + r[3])
    if missing:
        return 2
    if forbid and rows:
        print(f"test-skips: error: {len(rows)} skipped where every test must run (--forbid-skips)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
