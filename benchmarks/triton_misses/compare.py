"""For each Triton cache miss of a later start, the warm's compile of the same kernel that is closest, and which
parts of Triton's cache key differ (``python3 compare.py WARM.jsonl LATER.jsonl ...``, the listener's logs)."""

import json
import sys

KEY_PARTS = ("src_hash", "fn_key", "constants", "attrs")


def load(path: str) -> list[dict]:
    records = []
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def differences(warm: dict, miss: dict) -> tuple[list[str], list[str]]:
    parts = [k for k in KEY_PARTS if warm.get(k) != miss.get(k)]
    options = sorted(
        k for k in set(warm["options"]) | set(miss["options"]) if warm["options"].get(k) != miss["options"].get(k)
    )
    return parts, options


def explain(miss: dict, warm: list[dict]) -> None:
    opts = miss["options"]
    print(
        f"  MISS {miss['name']} hash {miss['hash'][:12]} num_warps {opts.get('num_warps')} "
        f"num_stages {opts.get('num_stages')}; constants {miss['constants'][:200]}"
    )
    same = [w for w in warm if w.get("name") == miss["name"]]
    print(f"     the warm compiled {len(same)} of that name")
    if any(w.get("hash") == miss["hash"] for w in same):
        print("     the same key as the warm's: its files were not where Triton's group file says (absolute paths)")
        return
    if not same:
        return
    closest = min(same, key=lambda w: sum(map(len, differences(w, miss))))
    parts, options = differences(closest, miss)
    print(f"     closest: hash {closest['hash'][:12]}, differs in {parts} and options {options}")
    for k in options[:6]:
        print(f"        {k}: warm {str(closest['options'].get(k))[:150]} | here {str(opts.get(k))[:150]}")
    for k in parts:
        print(f"        {k}: warm {str(closest.get(k))[:150]} | here {str(miss.get(k))[:150]}")


def main() -> None:
    warm = load(sys.argv[1])
    for path in sys.argv[2:]:
        records = load(path)
        misses = [r for r in records if r.get("hit") is False]
        print(f"== {path}: {len(records)} compiles, {len(misses)} misses")
        elsewhere = [
            r
            for r in records
            if r.get("hit") and any(not d.startswith(r.get("cache_dir") or "") for d in r.get("read_from", []))
        ]
        if elsewhere:
            print(
                f"  {len(elsewhere)} hit(s) read from outside this start's TRITON_CACHE_DIR, e.g. {elsewhere[0]['read_from']}"
            )
        for miss in misses[:12]:
            explain(miss, warm)


if __name__ == "__main__":
    main()
