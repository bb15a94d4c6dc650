"""The embedded log's command line.

    python -m runtime.sources produce TOPIC FILE.jsonl [--root DIR] [--partitions N] [--key FIELD]
    python -m runtime.sources tail TOPIC [--root DIR] [--partition P] [--from OFFSET] [-n N]

`produce` appends one record per JSON line (compact JSON); a malformed line is reported with its
line number on stderr and skipped. With ``--key FIELD`` a record whose object has that field goes
to the field's partition; the others go round-robin. `tail` prints ``partition<TAB>offset<TAB>
payload`` lines: the last N records of each partition, or N records from ``--from``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from ._errors import LogError
from ._log import EmbeddedLog, default_root


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with EmbeddedLog(args.root or default_root()) as log:
            return args.run(log, args)
    except (LogError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def produce(log: EmbeddedLog, args: argparse.Namespace) -> int:
    if args.topic in log.topics() and args.partitions is None:
        partitions = log.partitions(args.topic)
    else:
        partitions = args.partitions or 1
    log.create_topic(args.topic, partitions)
    counts, skipped = Counter(), 0
    with open(args.file, encoding="utf-8") if args.file != "-" else sys.stdin as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                print(f"{args.file}:{number}: skipped malformed JSON line: {exc}", file=sys.stderr)
                skipped += 1
                continue
            key = obj.get(args.key) if args.key and isinstance(obj, dict) else None
            counts[log.append_json(args.topic, obj, key=key)[0]] += 1
    per = ", ".join(f"partition {p}: {n}" for p, n in sorted(counts.items()))
    print(f"appended {sum(counts.values())} records to {args.topic!r} ({per or 'none'})"
          + (f"; skipped {skipped} malformed lines" if skipped else ""))
    return 0


def tail(log: EmbeddedLog, args: argparse.Namespace) -> int:
    chosen = [args.partition] if args.partition is not None else range(log.partitions(args.topic))
    for p in chosen:
        start = args.start if args.start is not None else log.end_offset(args.topic, p) - args.n
        for offset, payload in log.read(args.topic, p, max(start, 0), args.n):
            print(f"{p}\t{offset}\t{payload.decode('utf-8', errors='replace')}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runtime.sources",
                                     description="The embedded Kafka-style log.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    p = commands.add_parser("produce", help="append the lines of a JSONL file to a topic")
    p.add_argument("topic")
    p.add_argument("file", help="a JSON-lines file, or - for stdin")
    p.add_argument("--partitions", type=int, help="when creating the topic (default 1)")
    p.add_argument("--key", help="a field whose value picks the partition")
    p.set_defaults(run=produce)
    t = commands.add_parser("tail", help="print records of a topic")
    t.add_argument("topic")
    t.add_argument("--partition", type=int, help="only this partition (default all)")
    t.add_argument("--from", dest="start", type=int, help="the first offset (default: last N)")
    t.add_argument("-n", type=int, default=10, help="records per partition (default 10)")
    t.set_defaults(run=tail)
    for sub in (p, t):
        sub.add_argument("--root", help="the log directory (default $TUPLEFLOW_LOG_ROOT "
                                        "or ./.tupleflow/log)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
