"""``python -m meshcomm.dsl``: list the shipped programs, compile one to a plan file, or check a plan on the
host interpreter.

    python -m meshcomm.dsl list
    python -m meshcomm.dsl compile allreduce_twoshot --ranks 4 [--instances 2 | fill [--multiprocessors 132]]
        [-o plan.json]
    python -m meshcomm.dsl simulate plan.json [--elements 1000] [--op sum]
"""
import argparse
import json
import random
import sys

from . import programs
from .errors import DslError
from .simulate import expected_outputs, output_view, run_plan, units


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m meshcomm.dsl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the shipped programs")
    c = sub.add_parser("compile", help="compile a shipped program to a plan")
    c.add_argument("name")
    c.add_argument("--ranks", type=int, required=True)
    c.add_argument("--instances", default="1",
                   help="instance count, or fill: one thread block per multiprocessor of the target GPU")
    c.add_argument("--multiprocessors", type=int, default=132,
                   help="the target GPU's multiprocessors for --instances fill (default: 132, H100/H200 SXM)")
    c.add_argument("--inplace", action="store_true", help="input and output one buffer (NCCL's in-place layout)")
    c.add_argument("-o", "--output", help="plan file (default: stdout)")
    s = sub.add_parser("simulate", help="run a plan on the host interpreter against the collective's definition")
    s.add_argument("plan")
    s.add_argument("--elements", type=int, default=1000, help="elements per unit (n)")
    s.add_argument("--op", default="sum", choices=("sum", "max", "min", "prod"))
    s.add_argument("--seeds", type=int, default=0, help="also this many random interleavings of the blocks")
    args = p.parse_args(argv)
    try:
        if args.command == "list":
            for name in programs.NAMES:
                print(name)
        elif args.command == "compile":
            instances = (programs.fill_instances(args.name, args.ranks, args.multiprocessors)
                         if args.instances == "fill" else int(args.instances))
            text = programs.get(args.name)(args.ranks, instances=instances, inplace=args.inplace).dumps()
            if args.output:
                with open(args.output, "w") as f:
                    f.write(text)
            else:
                sys.stdout.write(text)
        else:
            with open(args.plan) as f:
                plan = json.load(f)
            R, n = plan["num_ranks"], args.elements
            rng = random.Random(0)
            inputs = [[rng.randint(-1000, 1000) for _ in range(units(plan["collective"], R)[0] * n)]
                      for _ in range(R)]
            want = expected_outputs(plan["collective"], inputs, n, args.op)
            ok = all([output_view(plan, n, r, g) for r, g in enumerate(run_plan(plan, n, inputs, args.op, seed))]
                     == want for seed in [None, *range(args.seeds)])
            print(f"{plan['name']}: {R} ranks, {n} elements per unit, {args.op}, {args.seeds} random "
                  f"interleavings: {'correct' if ok else 'WRONG'}")
            return 0 if ok else 1
    except (DslError, KeyError, ValueError) as e:
        print(f"meshcomm.dsl: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
