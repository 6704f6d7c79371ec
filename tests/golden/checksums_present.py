#!/usr/bin/python3
"""Every dataset with values in the checked-in golden fixtures (cases, backward, modules, states) carries HDF5's Fletcher32 checksum, so a changed bit
in a stored value is an input error instead of a silently different verdict (golden/SCHEMA.md, "Checksums").
Usage: checksums_present.py GOLDEN_DIR"""
import os
import sys

import h5py


def main():
    golden = sys.argv[1]
    missing, n = [], 0
    for sub in ("cases", "backward", "modules", "states"):
        if not os.path.isdir(os.path.join(golden, sub)):
            continue
        for f in sorted(os.listdir(os.path.join(golden, sub))):
            if not f.endswith(".h5"):
                continue
            n += 1
            with h5py.File(os.path.join(golden, sub, f), "r") as h:
                bare = []
                h.visititems(lambda name, o: bare.append(name) if isinstance(o, h5py.Dataset) and o.size > 0
                             and not o.fletcher32 else None)
            if bare:
                missing.append(f"golden/{sub}/{f}: {', '.join(bare)}")
    for m in missing:
        print("no Fletcher32 checksum:", m)
    if missing:
        print(f"{len(missing)} of {n} fixtures lack checksums. Regenerate them with the current attncheck: "
              "build/tools/attncheck generate --spec golden/suite.json --out golden --update --filter 'NAME' "
              "(golden/suite-backward.json for golden/backward, golden/suite-states.json for golden/states; "
              "leave --filter out to regenerate all; golden/modules: "
              "build/tools/attncheck generate-modules --out golden), then check that only the checksums changed: "
              "generate must print max |diff| 0 for every updated case.")
        return 1
    print(f"{n} golden fixtures, every dataset checksummed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
