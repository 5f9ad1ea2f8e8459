"""`python -P -m floodway.operator.refdocs [--check] [--root DIR]`: regenerate docs/reference/, or exit 1 naming
the pages that differ from what the code generates (as `floodway crd --check` does for the CRD)."""

import argparse
import sys
from pathlib import Path

from floodway.operator.refdocs import files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -P -m floodway.operator.refdocs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="Exit 1 if a checked-in page differs; write nothing.")
    parser.add_argument("--root", type=Path, default=files.REPO_ROOT, help="Repository root holding docs/.")
    args = parser.parse_args(argv)
    if args.check:
        stale = files.stale_paths(args.root)
        for path in stale:
            print(f"stale: {path}", file=sys.stderr)
        return 1 if stale else 0
    for path in files.write(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
