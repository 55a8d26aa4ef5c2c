#!/usr/bin/env python3
"""The Hugging Face side of scripts/gpu-check.sh (docs/gpu.md), run with the
GPU machine's own python3 (torch, transformers, PEFT).

  agree  the PEFT adapter and merged transformers folder that `empo2 export`
         wrote, loaded by transformers + PEFT: the batch's log-probs and the
         LoRA gradients of empo2's clipped objective (cgo/objective.go,
         recomputed here from its definition) against the values empo2
         dumped (`empo2 check train --dump`), in float32.
  bench  one LoRA rank-r all-target step (forward, backward, AdamW) of a
         Qwen2 of the given shape with random weights, timed like
         `empo2 check bench` (same batch and micro-batch), eager PyTorch and,
         when the time allows, torch.compile; with --empo2 the ratios to
         empo2's step.

Each writes one JSON document (--out) with a "kind" field, read by
`empo2 check report`.
"""

import argparse
import json
import math
import sys
import time


def versions():
    import torch
    import transformers
    import peft
    out = {"python": sys.version.split()[0], "torch": torch.__version__,
           "transformers": transformers.__version__, "peft": peft.__version__}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda"] = torch.version.cuda
    return out


def load_causal_lm(path, dtype, attn):
    """from_pretrained with the dtype keyword of transformers >= 4.56
    (`dtype`), falling back to the older `torch_dtype`."""
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn)
    except TypeError:
        return AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, attn_implementation=attn)


def seq_logprobs(model, ids):
    """log p(ids[t] | ids[:t]) for t >= 1 of a [B, T] batch, float32; [B, T]
    with column 0 = 0 (empo2's LogProbs convention)."""
    import torch
    logits = model(input_ids=ids, use_cache=False).logits.float()
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)


def clipped_objective(logps, batch, obj):
    """empo2's clipped policy-gradient loss (algo/ppo.go PPO.Token, cgo/objective.go tokenObjective,
    token-mean aggregation): per trained token, with r = exp(clamp(logp -
    old, -20, 20)), l = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)),
    and for A < 0 the dual clip min(l, -c A) (algo.PPO.Token); a sequence
    that low-probability masking dropped arrives with no trained token.
    Returns (loss, trained tokens)."""
    import torch
    total, n = None, 0
    lo, hi = 1 - obj["clip_low"], 1 + obj["clip_high"]
    c = obj["dual_clip"]
    for lp, s in zip(logps, batch):
        trained = [t for t in range(1, len(s["tokens"])) if s["trained"][t]]
        if not trained:
            continue
        idx = torch.tensor(trained, device=lp.device)
        old = torch.tensor([s["old_logp"][t] for t in trained], device=lp.device, dtype=torch.float32)
        adv = torch.tensor([s["advantage"][t] for t in trained], device=lp.device, dtype=torch.float32)
        r = torch.exp(torch.clamp(lp[idx] - old, -20, 20))
        pg = torch.maximum(-adv * r, -adv * torch.clamp(r, lo, hi))
        if c > 0:
            pg = torch.where((adv < 0) & (pg > -c * adv), -c * adv, pg)
        total = pg.sum() if total is None else total + pg.sum()
        n += len(trained)
    if obj["aggregation"] != "token-mean":
        raise SystemExit("gpu_hf_check: only token-mean aggregation is implemented")
    return total / n, n


def max_abs(a, b):
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0) if len(a) == len(b) else math.inf


def rel(ref, got):
    if len(ref) != len(got):
        return math.inf
    dd = sum((g - r) ** 2 for r, g in zip(ref, got))
    rr = sum(r * r for r in ref)
    if math.isnan(dd):
        return math.inf
    return math.sqrt(dd / rr) if rr > 0 else math.sqrt(dd)


def finite(x):
    """JSON has no infinities: write them as strings (as empo2 does)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("+Inf" if x > 0 else "-Inf")
    return x


def agree(args):
    import torch
    from peft import PeftModel
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with open(args.dump) as f:
        d = json.load(f)
    batch, obj = d["batch"], d["objective"]
    out = {"kind": "hf-check", "device": dev, "versions": versions(), "dump": args.dump,
           "logprob_tol": args.logprob_tol, "grad_tol": args.grad_tol}

    t0 = time.time()
    base = load_causal_lm(args.base, torch.float32, "eager").to(dev)
    model = PeftModel.from_pretrained(base, args.peft, is_trainable=True).to(dev)
    model.eval()  # no dropout; gradients still flow
    logps = []
    for s in batch:
        ids = torch.tensor([s["tokens"]], device=dev)
        logps.append(seq_logprobs(model, ids)[0])
    loss, n = clipped_objective(logps, batch, obj)
    loss.backward()
    hf_logp = [lp.detach().cpu().tolist() for lp in logps]
    lm = model.base_model.model
    hf_grads = {}
    for g in d["reference"]["grads"]:
        mod = lm.get_submodule(g["module"])
        layer = (mod.lora_A if g["part"] == "A" else mod.lora_B)["default"]
        gt = layer.weight.grad
        if gt is None or list(gt.shape) != g["shape"]:
            raise SystemExit(f"gpu_hf_check: {g['module']} lora_{g['part']}: grad {None if gt is None else list(gt.shape)}, expected shape {g['shape']}")
        hf_grads[(g["module"], g["part"])] = gt.detach().float().flatten().cpu().tolist()
    out["peft_seconds"] = round(time.time() - t0, 3)
    out["trained_tokens"] = n
    out["loss_hf"] = loss.item()

    def compare(vals):
        lp = max((max_abs(r[1:], h[1:]) for r, h in zip(vals["logp"], hf_logp)), default=0.0)
        worst, worst_name = 0.0, ""
        for g in vals["grads"]:
            x = rel(g["data"], hf_grads[(g["module"], g["part"])])
            if not x <= worst:
                worst, worst_name = x, f"{g['module']}.lora_{g['part']}"
        res = {"backend": vals["backend"], "logprob_max_abs_diff": finite(lp), "loss": vals["loss"],
               "loss_rel_diff": finite(abs(vals["loss"] - out["loss_hf"]) / max(abs(vals["loss"]), 1e-30)),
               "grad_worst_rel": finite(worst), "grad_worst_tensor": worst_name,
               "pass": lp <= args.logprob_tol and worst <= args.grad_tol}
        return res
    out["peft_vs_reference"] = compare(d["reference"])
    out["peft_vs_device"] = compare(d["device"])

    del model, base
    merged = load_causal_lm(args.merged, torch.float32, "eager").to(dev)
    merged.eval()
    with torch.no_grad():
        mlp = [seq_logprobs(merged, torch.tensor([s["tokens"]], device=dev))[0].cpu().tolist() for s in batch]
    m = max((max_abs(r[1:], h[1:]) for r, h in zip(d["reference"]["logp"], mlp)), default=0.0)
    out["merged_vs_reference"] = {"logprob_max_abs_diff": finite(m), "pass": m <= args.logprob_tol}
    out["pass"] = out["peft_vs_reference"]["pass"] and out["peft_vs_device"]["pass"] and out["merged_vs_reference"]["pass"]
    out["seconds"] = round(time.time() - t0, 3)
    return out


def bench(args):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from peft import LoraConfig, get_peft_model
    t_start = time.time()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    cfg = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, max_position_embeddings=max(4096, args.len),
                      tie_word_embeddings=False, attn_implementation=args.attn)
    out = {"kind": "hf-bench", "device": dev, "versions": versions(), "dtype": args.dtype, "attention": args.attn,
           "shape": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
                     "ffn": args.ffn, "vocab": args.vocab},
           "seqs": args.seqs, "len": args.len, "micro_seqs": args.micro, "rank": args.rank}
    torch.manual_seed(args.seed)
    t0 = time.time()
    with torch.device(dev):  # random init on the device (float32), then cast
        model = Qwen2ForCausalLM(cfg)
    model = model.to(dtype)
    if dev == "cuda":
        torch.cuda.empty_cache()
    model.requires_grad_(False)
    lcfg = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, lcfg)
    model.eval()
    sync()
    out["init_s"] = round(time.time() - t0, 3)
    out["params"] = sum(p.numel() for p in model.parameters())
    lora_params = [p for p in model.parameters() if p.requires_grad]
    out["lora_params"] = sum(p.numel() for p in lora_params)
    opt = torch.optim.AdamW(lora_params, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    ids = torch.randint(0, args.vocab, (args.seqs, args.len), device=dev)
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(args.seqs)], device=dev)
    micro = [slice(i, min(i + args.micro, args.seqs)) for i in range(0, args.seqs, args.micro)]
    ntok = args.seqs * (args.len - 1)

    def logp_of(m, x):
        logits = m(input_ids=x, use_cache=False).logits
        return torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, x[:, 1:, None])[..., 0]

    t0 = time.time()
    with torch.no_grad():
        old = torch.cat([logp_of(model, ids[s]) for s in micro])
    sync()
    out["old_logp_s"] = round(time.time() - t0, 3)

    def step(m):
        """forward + backward over the micro-batches (gradients added), then
        AdamW: the same work as empo2's ForwardBackward + AdamWStep."""
        opt.zero_grad(set_to_none=True)
        sync()
        t1 = time.time()
        for s in micro:
            lp = logp_of(m, ids[s])
            a = adv[s][:, None]
            r = torch.exp(torch.clamp(lp - old[s], -20, 20))
            pg = torch.maximum(-a * r, -a * torch.clamp(r, 0.8, 1.3))
            pg = torch.where((a < 0) & (pg > -10 * a), -10 * a, pg)
            (pg.sum() / ntok).backward()
        sync()
        t2 = time.time()
        torch.nn.utils.clip_grad_norm_(lora_params, 1.0)
        opt.step()
        sync()
        t3 = time.time()
        return {"forward_backward_s": round(t2 - t1, 4), "adamw_s": round(t3 - t2, 4), "seconds": round(t3 - t1, 4),
                "tok_per_s": round(args.seqs * args.len / (t3 - t1), 1)}

    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out["steps"] = [step(model) for _ in range(args.steps)]
    if dev == "cuda":
        out["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    write(args.out, out)  # the eager figures stay even if compiling is cut short

    left = args.time_left - (time.time() - t_start)
    if args.compile == "off":
        out["compile"] = {"skipped": "--compile off"}
    elif left < args.compile_need:
        out["compile"] = {"skipped": f"{left:.0f} s left of the phase, compiling needs ~{args.compile_need:.0f} s"}
    else:
        try:
            cm = torch.compile(model)
            t0 = time.time()
            first = step(cm)
            out["compile"] = {"first_step_s": round(time.time() - t0, 3), "steps": [first] + [step(cm) for _ in range(args.steps)]}
        except Exception as e:  # torch.compile failing is a result, not a crash of the check
            out["compile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    if args.empo2:
        try:
            with open(args.empo2) as f:
                e = json.load(f)
            es, hs = e["steps"][-1]["seconds"], out["steps"][-1]["seconds"]
            # time ratio HF / empo2 = tokens/s ratio empo2 / HF (same tokens)
            out["ratio"] = {"empo2_step_s": es, "hf_eager_step_s": hs, "hf_over_empo2_time": round(hs / es, 3),
                            "same_batch": e.get("train_seqs") == args.seqs and e.get("train_len") == args.len}
            cs = out.get("compile", {}).get("steps")
            if cs:
                out["ratio"]["hf_compiled_step_s"] = cs[-1]["seconds"]
                out["ratio"]["hf_compiled_over_empo2_time"] = round(cs[-1]["seconds"] / es, 3)
        except (OSError, KeyError, IndexError, TypeError, ValueError) as err:
            # empo2's benchmark failed or wrote no steps (a null "steps"): the
            # HF figures stand on their own
            out["ratio"] = {"error": f"{args.empo2}: {type(err).__name__}: {err}"}
    out["seconds"] = round(time.time() - t_start, 3)
    return out


def write(path, doc):
    import os
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("agree")
    a.add_argument("--dump", required=True, help="hf-check.json of empo2 check train --dump")
    a.add_argument("--base", required=True, help="transformers folder of the base model (export --format hf --merged of a B = 0 adapter)")
    a.add_argument("--peft", required=True, help="PEFT folder of the dumped adapter (export --format peft)")
    a.add_argument("--merged", required=True, help="transformers folder of base + adapter merged (export --format hf --merged)")
    a.add_argument("--logprob-tol", type=float, default=1e-4)
    a.add_argument("--grad-tol", type=float, default=1e-3)
    a.add_argument("--out", required=True)
    b = sub.add_parser("bench")
    for name, default in [("layers", 28), ("hidden", 3584), ("heads", 28), ("kv-heads", 4), ("ffn", 18944),
                          ("vocab", 152064), ("seqs", 16), ("len", 512), ("micro", 4), ("rank", 8), ("steps", 2), ("seed", 1)]:
        b.add_argument("--" + name, type=int, default=default)
    b.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    b.add_argument("--attn", default="sdpa", help="transformers attention implementation (eager, sdpa)")
    b.add_argument("--compile", choices=["auto", "off"], default="auto")
    b.add_argument("--compile-need", type=float, default=150, help="seconds torch.compile needs; skipped with less time left")
    b.add_argument("--time-left", type=float, default=1e9, help="seconds this phase may take")
    b.add_argument("--empo2", help="empo2 check bench result to compute ratios against")
    b.add_argument("--out", required=True)
    args = p.parse_args()
    out = agree(args) if args.cmd == "agree" else bench(args)
    write(args.out, out)
    if not out.get("pass", True):
        sys.exit(1)


if __name__ == "__main__":
    main()
