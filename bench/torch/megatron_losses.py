"""A small Megatron-core GPT trained tensor-parallel for a fixed number of steps on deterministic data; rank 0
writes the per-step losses and step times as JSON. Run it once per communication stack, then compare (the
comparison and the JSON are train_losses.py's):

    torchrun --nproc_per_node 4 bench/torch/megatron_losses.py --backend nccl --out nccl.json
    # meshcomm's c10d backend (PYTHONPATH=<build>/python):
    torchrun --nproc_per_node 4 bench/torch/megatron_losses.py --backend meshcomm --out meshcomm.json
    # meshcomm through torch.distributed's torchcomms routing (torchcomms installed; docs/torchcomms.md):
    torchrun --nproc_per_node 4 bench/torch/megatron_losses.py --backend meshcomm --torchcomms --out tc.json
    python3 bench/torch/megatron_losses.py --compare nccl.json meshcomm.json --rtol 1e-3 [--max-time-ratio 1.0]

Needs megatron-core (`pip install megatron-core`; written against 0.16.1, builds with 0.19.2 too) and what
its import needs (numpy, packaging; 0.19 also triton, which torch's Linux CUDA wheels bring); without them the
script says so and exits 77 (skip) before touching torch.distributed. `--check-import` only checks that import
(0 or 77), without torchrun.

The model: megatron.core.models.gpt.GPTModel with the local (no Transformer Engine) layer spec, 4 layers,
hidden 256, 8 heads, rotary positions, vocabulary 1024, float32, initialised on the CPU from one seed (the
same full weights whatever TP is). TP = --tp (default: all ranks); the other ranks are data-parallel. With
TP > 1, sequence parallelism is on: the embedding reduce-scatters its output, every column-parallel linear
all-gathers its input (all_gather_into_tensor) and every row-parallel linear reduce-scatters its output
(reduce_scatter_tensor), forward and backward (async_op=True in backward); the vocabulary-parallel
cross-entropy all-reduces (MAX, SUM). The norms are torch.nn.LayerNorm marked `sequence_parallel`
(Megatron's torch-norm fallback refuses sequence parallelism without apex); after backward the gradients of
all parameters so marked (the norms, the row-parallel biases) are summed over the TP group, as Megatron's
finalize_model_grads does, and with data parallelism every gradient is then averaged over the DP group.
Optimizer: torch.optim.Adam. Loss: the mean of GPTModel's per-token losses. Each step ends with a device
sync; step time: the median over the steps after the first five. CUDA_DEVICE_MAX_CONNECTIONS defaults to 1,
as Megatron recommends.
"""
import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_losses import add_run_arguments, batch_of, compare, init_distributed, report, timed_steps  # noqa: E402  (the DDP/FSDP2 check's)

SKIP = 77


def import_megatron():
    """megatron.core's modules used here, or exit 77 with a one-line message (rank 0) when they do not import."""
    with warnings.catch_warnings():
        # Without apex / Transformer Engine every rank warns about the torch fallbacks at import.
        warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).* not installed")
        try:
            import megatron.core as mcore
            from megatron.core import parallel_state
            from megatron.core.models.gpt import GPTModel
            from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
            from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
            from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
            from megatron.core.transformer.transformer_config import TransformerConfig
        except ImportError as e:
            missing = (getattr(e, "name", None) or "megatron").split(".")[0]
            if os.environ.get("RANK", "0") == "0":
                print(f"megatron_losses: SKIP: megatron.core does not import ({e}); install it with: "
                      f"pip install megatron-core{'' if missing == 'megatron' else ' ' + missing}", flush=True)
            sys.exit(SKIP)
    return argparse.Namespace(
        version=getattr(mcore, "__version__", "?"), parallel_state=parallel_state, GPTModel=GPTModel,
        get_gpt_layer_local_spec=get_gpt_layer_local_spec,
        model_parallel_cuda_manual_seed=model_parallel_cuda_manual_seed,
        TransformerBlockSubmodules=TransformerBlockSubmodules, TransformerConfig=TransformerConfig)


def layer_norm_class(torch):
    class LayerNorm(torch.nn.LayerNorm):
        """torch.nn.LayerNorm built from Megatron's norm arguments (config, hidden_size, eps, ...). Under
        sequence parallelism each rank normalises only its part of the sequence, so the weight and bias get
        partial gradients: marked `sequence_parallel`, they are summed over the TP group (sync_grads)."""

        def __init__(self, config, hidden_size, eps=1e-5, **_):
            super().__init__(hidden_size, eps=eps)
            for p in self.parameters():
                p.sequence_parallel = config.sequence_parallel

    return LayerNorm


def build_model(torch, mc, tp, vocab, hidden, heads, layers, seq):
    config = mc.TransformerConfig(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=1, sequence_parallel=tp > 1, use_cpu_initialization=True,
        params_dtype=torch.float32, hidden_dropout=0.0, attention_dropout=0.0, deterministic_mode=True)
    norm = layer_norm_class(torch)
    layer = mc.get_gpt_layer_local_spec()
    layer.submodules.input_layernorm = norm
    layer.submodules.pre_mlp_layernorm = norm
    # A block spec rather than the layer spec, so that the final norm is ours too.
    block = mc.TransformerBlockSubmodules(layer_specs=[layer] * layers, layer_norm=norm)
    return mc.GPTModel(config=config, transformer_layer_spec=block, vocab_size=vocab, max_sequence_length=seq,
                       position_embedding_type="rope", share_embeddings_and_output_weights=False)


def sync_grads(torch, dist, params, tp_group, dp_group):
    """Sum the sequence-parallel parameters' gradients over the TP group, then (with data parallelism) average
    every gradient over the DP group: one flat all_reduce each."""

    def reduce(grads, op, group):
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=op, group=group)
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))

    grads = [p.grad for p in params if p.grad is not None]
    if dist.get_world_size(tp_group) > 1:
        reduce([p.grad for p in params if p.grad is not None and getattr(p, "sequence_parallel", False)],
               dist.ReduceOp.SUM, tp_group)
    if dist.get_world_size(dp_group) > 1:
        reduce(grads, dist.ReduceOp.AVG, dp_group)


def train(args):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    # Megatron's tensor-parallel linears count on launch order to overlap their async collectives.
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    mc = import_megatron()  # exits 77 before torch.distributed is touched
    import torch
    import torch.distributed as dist

    local, rank, world = init_distributed(torch, dist, args.backend, args.torchcomms)
    tp = args.tp or world
    if world % tp:
        raise SystemExit(f"--tp {tp} does not divide the {world} ranks")
    ps = mc.parallel_state
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=1,
                                 create_gloo_process_groups=False)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(1234)  # CPU initialisation: the same full weights on every rank, split by TP
    mc.model_parallel_cuda_manual_seed(1234)
    vocab, hidden, heads, layers, seq, batch = 1024, 256, 8, 4, 128, 4
    model = build_model(torch, mc, tp, vocab, hidden, heads, layers, seq).cuda(local)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    tp_group, dp_group = ps.get_tensor_model_parallel_group(), ps.get_data_parallel_group()
    # The ranks of one TP group must see the same tokens: seed by the data-parallel rank.
    g = torch.Generator(device="cuda").manual_seed(100 + ps.get_data_parallel_rank())
    position_ids = torch.arange(seq, device="cuda").unsqueeze(0).expand(batch, -1)
    # Megatron's attention masks where the mask is True: above the diagonal.
    causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device="cuda"), 1).view(1, 1, seq, seq)

    def step(x, y):
        loss = model(x, position_ids, causal, labels=y).mean()  # per-token losses [batch, seq]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sync_grads(torch, dist, params, tp_group, dp_group)
        opt.step()
        return loss

    losses, times = timed_steps(torch, dist, args.steps, lambda: batch_of(torch, g, vocab, batch, seq), step)
    report(torch, args, "megatron", rank, world, losses, times, tp=tp, sequence_parallel=tp > 1,
           megatron_core=mc.version, torchcomms_routing=args.torchcomms)
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    ap.add_argument("--tp", type=int, default=0, help="tensor-parallel size (default: the world size)")
    ap.add_argument("--check-import", action="store_true",
                    help="only check that megatron.core imports: exit 0, or 77 with a message")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare, args.rtol, args.max_time_ratio)
    if args.check_import:
        mc = import_megatron()
        print(f"megatron_losses: megatron.core {mc.version} imports", flush=True)
        return 0
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
