"""The DSA decode pipeline across GPUs, one process per GPU, through torch.distributed (NCCL):
each rank serves its share of every step's requests (indexer scores, GVR top-K, sparse
attention) on its own device; the selected indices, the scores and the lengths are gathered
on rank 0 and every row is checked against the oracle there. NVLink multicast (NVLS) is left
off (``NCCL_NVLS_ENABLE=0``). Exit status 1 on an inexact row::

    python3 tools/multigpu_dsa.py --gpus 2 --out $OUT/multigpu_dsa.json

Results of a run: ``benchmarks/results/h200x2/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _rank_main(rank: int, world: int, args, port: int) -> None:
    import torch
    import torch.distributed as dist
    from gvr_integration.pipeline import DecodeConfig, DSADecodePipeline, decode_schedule
    from gvr_reference.realdata import load_sample

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    sample = load_sample(args.sample)
    results = []
    for k in args.k:
        for next_n in args.next_n:
            cfg = DecodeConfig(k=k, next_n=next_n, batch=args.batch)
            pipe = DSADecodePipeline(sample, cfg, device=dev)
            steps = decode_schedule(len(sample.positions), next_n, args.batch, args.steps)
            for t, groups in enumerate(steps):
                mine = groups[rank::world]  # this rank's requests of the step
                inp = pipe.inputs(mine)
                logits = pipe.scores(inp)
                idx = pipe.select(logits, inp.kv_lens)
                pipe.attend(inp, idx)  # the step runs end to end on every rank
                parts = {}
                for name, x in (("idx", idx), ("logits", logits), ("kv", inp.kv_lens)):
                    got = [torch.empty_like(x) for _ in range(world)]
                    dist.all_gather(got, x.contiguous())
                    parts[name] = got
                if rank == 0:
                    bad = 0
                    for r in range(world):
                        report = pipe.check(parts["logits"][r], parts["kv"][r], parts["idx"][r])
                        bad += 0 if report.ok else 1
                    results.append(
                        dict(k=k, next_n=next_n, step=t, rows=int(idx.shape[0]) * world,
                             ranks=world, inexact_ranks=bad)
                    )  # fmt: skip
    dist.barrier()
    if rank == 0:
        rows = sum(r["rows"] for r in results)
        inexact = sum(r["inexact_ranks"] for r in results)
        summary = dict(
            gpus=world, steps=len(results), rows_checked=rows, inexact_rank_steps=inexact,
            devices=[torch.cuda.get_device_name(i) for i in range(world)],
            nccl=".".join(map(str, torch.cuda.nccl.version())), torch=torch.__version__,
        )  # fmt: skip
        print(json.dumps(summary, indent=1))
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(dict(summary=summary, steps=results), fh, indent=1)
        if inexact:
            print("INEXACT", file=sys.stderr)
    dist.destroy_process_group()
    if rank == 0 and any(r["inexact_ranks"] for r in results):
        raise SystemExit(1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--k", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--next-n", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, default=8, help="requests per step (all ranks)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--sample", default=None)
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    world = args.gpus
    if torch.cuda.device_count() < world:
        print(f"needs {world} CUDA devices, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    if args.batch % world:
        ap.error(f"--batch must be a multiple of --gpus ({world}), got {args.batch}")
    mp.spawn(_rank_main, args=(world, args, args.port), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
