"""`nelssa decode`'s options: its parser and the checks made after parsing (the run itself is
``cli_decode.py``'s)."""

from __future__ import annotations

import argparse
import shutil
import tempfile

from nelssa.cli_fpga import add_board_args
from nelssa.config_args import add_config_options, config_values, field_docs, user_help
from nelssa.decode_hardware import (
    model_config,
    model_name,
    weights_folder,
)
from nelssa.emu.latency.model import POSITIVE as CHUNK
from nelssa.emu.latency.model import Sparsity
from nelssa.emu.policy.schedulers import SCHEDULERS
from nelssa.hardware_options import add_entry_arg, add_hardware_file_arg, presets
from nelssa.host.gpu.config import PRESETS, LlamaConfig, PrefillConfig, describe_shape
from nelssa.host.gpu.gpu_timer import (
    TIMERS,
    TorchConfig,
)
from nelssa.hw.model.drampower import command_trace_option
from nelssa.options import (
    POSITIVE_INT,
    SECONDS,
    SEED,
    UsageError,
    endpoint,
    int_range,
    number,
    output_file,
)

PREFILL_OPTIONS = ("prefill_chunk", "prefill_limit_s", "prefill", "emulate_above_s")
"""PrefillConfig fields `decode` takes as options."""
TORCH_OPTIONS = ("torch_device", "gpu_timer", "torch_weights")
"""TorchConfig fields (--gpu-timer's choices are the registry's)."""

MAX_PROMPT = 1 << 20
"""Longest prompt --short-len and --long-len take (the model's positions bound it further)."""


def length_range(text: str) -> tuple[int, int]:
    """``N`` or ``LO..HI`` prompt lengths, 1 <= LO <= HI <= MAX_PROMPT."""
    lo, dots, hi = text.partition("..")
    hi = hi if dots else lo
    if not (lo.isdigit() and hi.isdigit() and 1 <= int(lo) <= int(hi) <= MAX_PROMPT):
        raise argparse.ArgumentTypeError(f"must be N or LO..HI with 1 <= LO <= HI <= "
                                         f"{MAX_PROMPT}, got {text!r}")
    return int(lo), int(hi)


def prefill_config(args: argparse.Namespace) -> PrefillConfig:
    return PrefillConfig(**config_values(args, PrefillConfig, PREFILL_OPTIONS))


def add_decode_options(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`decode`'s parser, its options and their help (``cli_decode.add_decode_parser`` gives
    it its command)."""
    p = sub.add_parser("decode", help="a mixed batch decoded end to end on the GPU and the node")
    p.add_argument("--node", type=endpoint,
                   help="a running node's endpoint (default: boot one here)")
    p.add_argument("--devices", type=int_range(1, 32), default=4, help="1..32")
    p.add_argument("--backend", choices=("rtl", "model", "fpga"), default="rtl")
    add_board_args(p, several=True)
    add_hardware_file_arg(p)
    add_entry_arg(p, "links")
    add_entry_arg(p, "pnm", "; its device (units, DDR5 grade and overrides, sub-channels) "
                  "is what the booted node's model or rtl devices are")
    shapes = "; ".join(f"{name}: {describe_shape(make())}" for name, make in PRESETS.items())
    models = ", ".join(n for n, m in presets().models.items() if m.hf and n not in PRESETS)
    p.add_argument("--model", metavar="NAME|PATH",
                   help=f"the decoder: a Hugging Face model folder (config.json + safetensors: "
                        f"its weights), a config.json (or a folder of one) without weights, or "
                        f"a model entry: the decoder's own small and llama-3-8b (32000 tokens "
                        f"unless --vocab), or the description's {models} or an entry of "
                        f"--hardware (llama, mistral, qwen2 shapes); random weights but for a "
                        f"weights folder [default: the files' use.model, else small, "
                        f"{LlamaConfig().num_hidden_layers} layers]. {shapes}"
                        .replace("%", "%%"))
    p.add_argument("--model-shape", metavar="NAME", help="deprecated: --model NAME")
    p.add_argument("--layers", type=int_range(1, 256),
                   help="layers of the --model shape: the first ones, cut to fit the machine "
                        "(default: the shape's)")
    p.add_argument("--vocab", type=int_range(1, 1 << 20),
                   help="vocabulary of the --model shape (default: the shape's)")
    p.add_argument("--positions", type=int_range(1, 1 << 24), metavar="N",
                   help="positions of the --model shape (default: the shape's; llama-3-8b "
                        "131072): longer prompts, RoPE (Llama-3 scaled) taken on past the "
                        "trained range, as long-context variants do; random weights do not "
                        "mind")
    add_config_options(p, PrefillConfig, PREFILL_OPTIONS)
    p.add_argument("--kmeans-iterations", type=int_range(1, 1000), metavar="N",
                   default=Sparsity().kmeans_iterations,
                   help="k-means rounds per segment of a long prompt's keys (the reference "
                        "figure is the default; the set-up's wall time scales with it, the "
                        "emulated times do not) [default: %(default)s]")
    p.add_argument("--rtl-layers", type=int_range(0, 0xFFFF), default=0, metavar="K",
                   help="with --backend model: layers 0..K-1 also on a Verilated twin of "
                        "each device, answered by it and checked against the model devices "
                        "bit for bit and cycle for cycle (sampled simulation; `node up "
                        "--rtl-layers`)")
    p.add_argument("--weight-sets", type=int_range(0, 256), default=0, metavar="N",
                   help="random weights: draw layers 0..N-1 only (the values a model of N "
                        "layers has) and give layer i the weights of layer i mod N, so many "
                        "layers of a large shape fit the host; each layer's KV is still its "
                        "own; 0: every layer its own weights [default: %(default)s]")
    p.add_argument("--device-memory", choices=("ram", "file"), default="ram",
                   help="where the booted node's model devices hold their memory: RAM, or a "
                        "sparse file each in the node's temporary folder, removed at exit "
                        "(`node up --device-memory`; for KV beyond the host's memory) "
                        "[default: %(default)s]")
    p.add_argument("--command-trace", type=command_trace_option, metavar="FILE",
                   help="the booted node's model devices write their DDR5 commands when the "
                        "run ends: DRAMPower CSV per device and sub-channel (FILE's stem + "
                        "-dev<N>-sub<M>) and the part's DRAMPower memspec (`node up "
                        "--command-trace`)")
    p.add_argument("--short", type=int_range(0, 256), default=4, help="short requests (0..256)")
    p.add_argument("--long", type=int_range(0, 64), default=2, help="long requests (0..64)")
    p.add_argument("--short-len", type=length_range, default="64..512",
                   help="prompt lengths LO..HI")
    p.add_argument("--long-len", type=length_range, default="3072..6144",
                   help="prompt lengths LO..HI")
    p.add_argument("--t-input", type=POSITIVE_INT,
                   help="routing threshold (tokens); default: the latency model's crossover "
                        "for --gpu, --link, --devices, the model, --selection and the cluster "
                        "size (`nelssa crossover` shows it)")
    add_config_options(p, Sparsity, ("selection",))
    p.add_argument("--chunk", type=number(CHUNK), default=Sparsity.chunk_tokens,
                   help=f"{field_docs(Sparsity)['chunk_tokens']} The paper's figure, which "
                        "the serving emulator and the latency model use too; a run of fewer "
                        "--steps appends no chunk (--chunk 16 shows the appends)")
    p.add_argument("--steps", type=int_range(1, 100000), default=32, help="1..100000")
    add_entry_arg(p, "gpus", " (the roofline time model's)")
    add_config_options(p, TorchConfig, ("torch_device", "torch_weights"))
    p.add_argument("--gpu-timer", choices=sorted(TIMERS), metavar="NAME",
                   help=f"{user_help(field_docs(TorchConfig)['gpu_timer'])} Choices: "
                        f"{', '.join(sorted(TIMERS))}.")
    p.add_argument("--timeout", type=SECONDS, default=300.0, help="seconds per node request")
    p.add_argument("--no-accuracy", action="store_true",
                   help="skip the comparison with dense attention over the full context")
    p.add_argument("--trace", type=output_file, default="decode-trace.json",
                   help="Perfetto trace-event JSON")
    p.add_argument("--plot", type=output_file, default="decode.png", help="PNG plot")
    p.add_argument("--json", type=output_file,
                   help="also write the run as JSON here: each step's report, each request's "
                        "tier and outcome, the totals")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier run's --trace, --plot and --json (a run writes its "
                   "resolved configuration beside them, NAME.config.json, and refuses paths "
                   "that hold one)")
    p.add_argument("--grow", action="store_true",
                   help="add a request that grows past T_input and migrates to the PNM tier")
    p.add_argument("--scheduler", choices=sorted(SCHEDULERS), default="ours",
                   help="who plans the steps: ours (the project's implementation of vLLM v1's "
                        "algorithm) or vllm (vLLM's own v1 scheduler, unmodified, in its own "
                        "environment: `make vllm`) [default: %(default)s]")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--gpu-nodes", type=int_range(1, 64), default=1, metavar="K",
                   help="GPU decode nodes, each a process of its own with its own engine and "
                        "the same batch, against one PNM node, sharing its devices' emulated "
                        "timeline (a clock domain); 1: this process alone [default: "
                        "%(default)s]")
    p.add_argument("--domain-ticket", metavar="HEX|-",
                   help="join the clock domain of this ticket on the --node (`-`: read it "
                        "from standard input, as --gpu-nodes hands it to its nodes)")
    p.add_argument("--steps-json", type=output_file, metavar="PATH",
                   help="also write each step's emulated figures as JSON")
    return p


def check_decode_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.command != "decode":
        return
    if args.short + args.long == 0:
        parser.error("--short and --long are both 0: nothing to decode")
    if args.backend == "fpga" and not args.bar and args.node is None:
        parser.error("--backend fpga needs --bar BOARD for each board (a PCI device folder, or "
                     "a fake board from `nelssa fpga fake`)")
    if args.bar and args.backend != "fpga":
        parser.error("--bar goes with --backend fpga")
    if args.grow and args.scheduler != "ours":
        parser.error(f"--grow sizes the GPU's KV after the prefills, and the {args.scheduler} "
                     "scheduler's is fixed when it starts: use --scheduler ours")
    if args.domain_ticket is not None and (args.node is None or args.gpu_nodes > 1):
        parser.error("--domain-ticket joins the clock domain of a running node: give --node, "
                     "and no --gpu-nodes")
    if args.rtl_layers and (args.backend != "model" or args.node is not None):
        parser.error(f"--rtl-layers {args.rtl_layers}: sampling puts the other layers on model "
                     "devices of a node this run boots (--backend model, no --node)")
    if args.device_memory == "file" and (args.backend != "model" or args.node is not None):
        parser.error("--device-memory file: the model devices of a node this run boots "
                     "(--backend model, no --node)")
    if args.command_trace is not None and (args.backend != "model" or args.node is not None):
        parser.error("--command-trace: the model devices of a node this run boots (--backend "
                     "model, no --node)")
    if args.weight_sets and weights_folder(args) is not None:
        parser.error("--weight-sets shares random weights between layers; --model loads them")
    from nelssa.host.gpu.request import DecodeConfig

    for option, field in (("--t-input", "t_input"), ("--selection", "selection"),
                          ("--chunk", "chunk")):  # what the decode itself refuses, by option
        if getattr(args, field) is None:
            continue
        try:
            DecodeConfig(**{field: getattr(args, field)})
        except ValueError as e:
            parser.error(f"argument {option}: {e}")
    check_model_args(parser, args)


def check_model_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The model the PNM devices can run, and a run this host can hold and prefill in time
    (estimated from the shapes, before anything is built)."""
    from nelssa.driver.status import SUPPORTED_HEAD_DIMS
    from nelssa.host.gpu.prefill import available_memory, check_run, estimate_run
    from nelssa.hw.model.engine import EngineParams

    if weights_folder(args) is not None and (args.model_shape or args.layers or args.vocab
                                             or args.positions):
        parser.error("--model-shape, --layers, --vocab and --positions describe a random "
                     "model; --model loads one")
    if args.model is not None and args.model_shape is not None:
        parser.error("--model-shape is --model's old name: give one")
    try:
        what = f"--model {model_name(args)}" if args.model_shape is None else \
            f"--model-shape {args.model_shape}"
        c = model_config(args)
    except UsageError as e:
        parser.error(str(e))
    except ValueError as e:
        parser.error(f"{what}: {e}")
    if c.head_dim not in SUPPORTED_HEAD_DIMS:
        parser.error(f"{what}: head_dim {c.head_dim}: the PNM devices take "
                     f"{', '.join(map(str, SUPPORTED_HEAD_DIMS))}")
    most = EngineParams().num_qheads
    if c.group > most:
        parser.error(f"{what}: {c.group} query heads per KV head: the PNM devices take at "
                     f"most {most}")
    for option, span in (("--short-len", args.short_len), ("--long-len", args.long_len)):
        if span[1] + args.steps + 1 > c.max_position_embeddings:  # before anything is built
            parser.error(f"{option}: a prompt of {span[1]} tokens and {args.steps + 1} "
                         f"generated exceed the model's {c.max_position_embeddings} positions")
    cfg = prefill_config(args)
    short = [args.short_len[1]] * args.short
    long = [args.long_len[1]] * args.long
    file_memory = args.device_memory == "file"
    est = estimate_run(c, short, long, cfg, accuracy=not args.no_accuracy,
                       local_node=args.node is None, twin_layers=args.rtl_layers,
                       weight_sets=args.weight_sets, file_memory=file_memory)
    why = check_run(est, cfg, available_memory(),
                    shutil.disk_usage(tempfile.gettempdir()).free if file_memory else None)
    if why:
        parser.error(f"{what} ({c.num_hidden_layers} layers) with --short {args.short} x "
                     f"--short-len up to {args.short_len[1]} and --long {args.long} x --long-len "
                     f"up to {args.long_len[1]}: the run {why} (fewer --layers, shorter "
                     "prompts, --no-accuracy, --weight-sets, --device-memory file or "
                     "--prefill-limit)")
