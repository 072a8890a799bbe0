"""Megatron-core's MoE token dispatchers on one model: the "alltoall" dispatcher (torch.distributed on NCCL)
against the "flex" dispatcher with its DeepEP backend running on meshcomm.ep through the deep_ep
compatibility package (docs/ep.md), trained side by side from the same weights on the same data:

    PYTHONPATH=<build>/python torchrun --nproc_per_node 4 bench/torch/megatron_moe.py [--json out.json]

`--deep-ep installed` takes whatever `deep_ep` is importable instead (DeepEP V1 itself, for a peer run).
The model: GPTModel with the local layer spec (no Transformer Engine), 2 layers, hidden 256, 8 heads,
8 experts top-2 with an auxiliary loss, bf16, vocabulary 1024; expert parallelism over all ranks (the dense
weights are data-parallel: their gradients are averaged, the experts' are not). Each step trains both models
on this rank's batch (Adam) and records the mean loss over ranks and the step time. Passes when every
step's losses agree within --rtol (bf16: the two paths sum expert outputs in different orders). Needs
megatron-core (0.19.2 checked) and its import's dependencies; exits 77 (skip) without them.
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
SKIP = 77


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deep-ep", choices=["meshcomm", "installed"], default="meshcomm")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rtol", type=float, default=2e-2)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # the flex preprocessing's torch.compile needs Triton

    import torch
    import torch.distributed as dist

    if args.deep_ep == "meshcomm":
        import meshcomm.ep

        sys.path.insert(0, meshcomm.ep.compat_path())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).* not installed")
        try:
            from megatron.core import parallel_state
            from megatron.core.models.gpt import GPTModel
            from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
            from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
            from megatron.core.transformer.transformer_config import TransformerConfig
        except ImportError as e:
            if os.environ.get("RANK", "0") == "0":
                print(f"megatron_moe: SKIP: megatron.core does not import ({e})", flush=True)
            sys.exit(SKIP)
    import deep_ep

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                             expert_model_parallel_size=world, expert_tensor_parallel_size=1)

    def build(dispatcher):
        config = TransformerConfig(
            num_layers=2, hidden_size=256, num_attention_heads=8, ffn_hidden_size=512,
            num_moe_experts=args.experts, moe_router_topk=2, moe_ffn_hidden_size=512, moe_grouped_gemm=False,
            moe_permute_fusion=False, moe_router_fusion=False, moe_router_dtype="fp32",
            moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2,
            tensor_model_parallel_size=1, pipeline_model_parallel_size=1, expert_model_parallel_size=world,
            expert_tensor_parallel_size=1, add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0,
            bf16=True, params_dtype=torch.bfloat16, transformer_impl="local",
            **({"moe_token_dispatcher_type": "alltoall"} if dispatcher == "alltoall" else
               {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}))
        model_parallel_cuda_manual_seed(1234)
        spec = get_gpt_layer_local_spec(num_experts=args.experts, moe_grouped_gemm=False)
        model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=1024, max_sequence_length=128,
                         position_embedding_type="rope", pre_process=True, post_process=True)
        return model.cuda().bfloat16()

    models = {"alltoall": build("alltoall"), "deepep": build("deepep")}
    models["deepep"].load_state_dict(models["alltoall"].state_dict())
    optimizers = {k: torch.optim.Adam(m.parameters(), lr=1e-3) for k, m in models.items()}
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    losses = {k: [] for k in models}
    times = {k: [] for k in models}
    for _ in range(args.steps):
        ids = torch.randint(0, 1024, (2, 64), device="cuda", generator=g)
        pos = torch.arange(64, device="cuda").unsqueeze(0).expand(2, -1)
        labels = torch.roll(ids, 1, dims=1)
        for name, model in models.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            optimizers[name].zero_grad(set_to_none=True)
            loss = model(ids, pos, attention_mask=None, labels=labels).float().mean()
            loss.backward()
            for p in model.parameters():  # dense weights are data-parallel; experts (allreduce=False) are not
                if p.grad is not None and getattr(p, "allreduce", True):
                    dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            optimizers[name].step()
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
            losses[name].append(mean.item())
    worst = max(abs(a - b) / max(abs(a), 1e-6) for a, b in zip(losses["alltoall"], losses["deepep"]))
    step = {k: statistics.median(v[5:] or v) * 1e3 for k, v in times.items()}
    ok = worst <= args.rtol
    if rank == 0:
        print(f"megatron_moe: {world} ranks, deep_ep from {os.path.dirname(deep_ep.__file__)}; losses alltoall "
              f"{losses['alltoall'][0]:.4f} -> {losses['alltoall'][-1]:.4f}, deepep {losses['deepep'][0]:.4f} -> "
              f"{losses['deepep'][-1]:.4f}; max rel diff {worst:.2e} (rtol {args.rtol}); step ms alltoall "
              f"{step['alltoall']:.2f}, deepep {step['deepep']:.2f}; {'PASS' if ok else 'FAIL'}", flush=True)
        if args.json:
            from run_metadata import run_metadata

            with open(args.json, "w") as f:
                json.dump({**run_metadata(world), "losses": losses, "step_ms": step, "max_rel_diff": worst}, f,
                          indent=1)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
