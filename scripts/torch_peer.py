#!/usr/bin/env python3
"""The PyTorch peer of `npm run bench:extract` and `npm run bench:generate`:
the benchmark's Llama model written in plain PyTorch the way HuggingFace's
LlamaModel computes it (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU, final norm), run as a careful PyTorch user would: inference mode, two
threads (idle OpenMP threads waiting passively), length-sorted batches of 16,
left padding with explicit position ids (cumsum(mask) - 1).

Modes:
  convert MODEL_DIR WEIGHTS_DIR
      The ONNX initializers of MODEL_DIR as one .npy per tensor, in
      HuggingFace's names and orientation (linear layers [out, in]) — the
      checkpoint a PyTorch user would already have. Not timed.
  extract MODEL_DIR WEIGHTS_DIR IDS_JSON OUT_DIR
      Last-token hidden states of the stored layers (the default rule
      l/(L-1) >= 0.4; the last one after the final norm) of every prompt in
      IDS_JSON (its "ids": token ids, one list per row, made by hsm's tokenizer:
      Debian has no Python tokenizers package), written as L{layer:03d}.npy (float16), rows
      in IDS_JSON's order. Model load is counted.
  generate MODEL_DIR WEIGHTS_DIR IDS_JSON OUT_JSON [--max-new-tokens N]
      Greedy decoding with a KV cache (HuggingFace's generate with num_beams 1:
      a prefill, then one token a step; finished rows keep decoding padding),
      stopping on every eos_token_id of config.json. Writes the generated ids
      of each row (the EOS left out) and whether it stopped on EOS.
  export MODEL_DIR WEIGHTS_DIR OUT_DIR
      The same model as a PyTorch user exports it by hand: torch.onnx.export
      of a module computing logits only, no KV cache (int64 input_ids,
      attention_mask, position_ids), written as transformers 4.36 writes
      Llama (rotary tables sliced to the keys' length and indexed by
      position_ids, the causal mask from torch.arange, repeat_kv by expand and
      reshape), into OUT_DIR/model.onnx beside MODEL_DIR's config and
      tokenizer. Not timed.
  compare HSM_STORE OUT_DIR
      hsm's store against the peer's states: the largest absolute and relative
      deviation per layer, and whether every value is within float16 rounding
      (half a float16 ulp) plus float32 arithmetic noise of the row's scale.

Every timed mode prints one JSON line: rows, seconds, rows_per_s, threads.
"""
import json
import math
import os
import sys
import time

import numpy as np

BATCH = 16
THREADS = 2
# Debian's PyTorch runs its GEMMs in OpenBLAS's own threads and everything else
# in OpenMP's; by default OpenMP's idle threads spin, taking the two cores from
# the GEMMs (4 to 7 times slower here). Waiting passively gives them back.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def stored_layers(n):
    """The default layer rule l/(L-1) >= 0.4, in integers (with one block, that block)."""
    return [0] if n == 1 else [l for l in range(n) if 5 * l >= 2 * (n - 1)]


def convert(model_dir, out_dir):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(os.path.join(model_dir, "model.onnx"))
    os.makedirs(out_dir, exist_ok=True)
    for init in model.graph.initializer:
        if not init.name.endswith(".weight"):
            continue
        w = numpy_helper.to_array(init)
        # Exported MatMul initializers are [in, out]; HuggingFace's linear layers are [out, in].
        if w.ndim == 2 and init.name not in ("model.embed_tokens.weight",):
            w = w.T
        np.save(os.path.join(out_dir, init.name + ".npy"), np.ascontiguousarray(w, dtype=np.float32))


class Llama:
    def __init__(self, model_dir, weights_dir, lm_head=False):
        import torch

        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            c = json.load(f)
        self.torch = torch
        self.d = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.head_dim = c.get("head_dim") or self.d // self.heads
        self.eps = c["rms_norm_eps"]
        eos = c.get("eos_token_id")
        self.eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        hd = self.head_dim
        # HuggingFace's default rotary embedding: inv_freq in float32, angles position × inv_freq.
        self.inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))

        def w(name):
            return torch.from_numpy(np.load(os.path.join(weights_dir, name + ".npy")))

        self.embed = w("model.embed_tokens.weight")
        self.layers = []
        for i in range(self.n_layers):
            p = "model.layers.%d." % i
            self.layers.append({k: w(p + k + ".weight") for k in (
                "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")})
        self.norm = w("model.norm.weight")
        self.lm_head = w("lm_head.weight") if lm_head else None

    def rms(self, x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * self.torch.rsqrt(var + self.eps))

    def rope(self, pos):
        freqs = pos.float()[..., None] * self.inv_freq
        emb = self.torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]

    def rotate(self, x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + self.torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def forward(self, ids, mask, pos, keep=(), cache=None):
        """One pass over ids [B, T]; mask covers the cache and ids. Returns the last position's
        state of each layer in keep (the last layer after the final norm), the final hidden
        states, and the KV cache (keys after rotary, per layer, [B, KV, S, hd])."""
        torch, F = self.torch, self.torch.nn.functional
        B, T = ids.shape
        S = mask.shape[1]
        H, KV, hd = self.heads, self.kv_heads, self.head_dim
        x = F.embedding(ids, self.embed)
        cos, sin = self.rope(pos)
        allowed = mask[:, None, None, :].bool()
        if T > 1:
            allowed = allowed & torch.ones(T, S, dtype=torch.bool).tril(S - T)
        bias = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
        kept, new_cache = {}, []
        for i, L in enumerate(self.layers):
            h = self.rms(x, L["input_layernorm"])
            q = F.linear(h, L["self_attn.q_proj"]).view(B, T, H, hd).transpose(1, 2)
            k = F.linear(h, L["self_attn.k_proj"]).view(B, T, KV, hd).transpose(1, 2)
            v = F.linear(h, L["self_attn.v_proj"]).view(B, T, KV, hd).transpose(1, 2)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            if cache is not None:
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
            new_cache.append((k, v))
            # HuggingFace's repeat_kv: each key/value head serves H / KV query heads.
            kx = k.repeat_interleave(H // KV, dim=1)
            vx = v.repeat_interleave(H // KV, dim=1)
            att = torch.matmul(q, kx.transpose(2, 3)) / math.sqrt(hd) + bias
            ctx = torch.matmul(att.softmax(dim=-1), vx).transpose(1, 2).reshape(B, T, H * hd)
            x = x + F.linear(ctx, L["self_attn.o_proj"])
            h = self.rms(x, L["post_attention_layernorm"])
            x = x + F.linear(F.silu(F.linear(h, L["mlp.gate_proj"])) * F.linear(h, L["mlp.up_proj"]), L["mlp.down_proj"])
            if i in keep and i != self.n_layers - 1:
                kept[i] = x[:, -1]
        x = self.rms(x, self.norm)
        if self.n_layers - 1 in keep:
            kept[self.n_layers - 1] = x[:, -1]
        return kept, x, new_cache


def export(model_dir, weights_dir, out_dir):
    import shutil

    import torch

    model = Llama(model_dir, weights_dir, lm_head=True)
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        max_pos = json.load(f)["max_position_embeddings"]

    class Exported(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # Parameters, as a user's module holds them: the exporter writes them as initializers.
            P = torch.nn.Parameter
            self.embed, self.norm, self.lm_head = P(model.embed), P(model.norm), P(model.lm_head)
            self.layers = torch.nn.ModuleList()
            for L in model.layers:
                m = torch.nn.Module()
                for k, v in L.items():
                    setattr(m, k.replace(".", "_"), P(v))
                self.layers.append(m)
            # LlamaRotaryEmbedding's cached tables: the angles position × inv_freq in float32, as the peer's.
            freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), model.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos_cached", emb.cos(), persistent=False)
            self.register_buffer("sin_cached", emb.sin(), persistent=False)

        def forward(self, input_ids, attention_mask, position_ids):
            F = torch.nn.functional
            B, T = input_ids.shape
            H, KV, hd = model.heads, model.kv_heads, model.head_dim
            x = F.embedding(input_ids, self.embed)
            lo = torch.finfo(torch.float32).min
            # _prepare_4d_causal_attention_mask without a past: torch.arange over the query length.
            cond = torch.arange(T)
            causal = torch.full((T, T), lo).masked_fill(cond < (cond + 1).view(T, 1), 0.0)
            S = attention_mask.shape[1]
            inverted = 1.0 - attention_mask[:, None, None, :].expand(B, 1, T, S).to(torch.float32)
            bias = causal[None, None] + inverted.masked_fill(inverted.bool(), lo)
            for L in self.layers:
                h = model.rms(x, L.input_layernorm)
                q = F.linear(h, L.self_attn_q_proj).view(B, T, H, hd).transpose(1, 2)
                k = F.linear(h, L.self_attn_k_proj).view(B, T, KV, hd).transpose(1, 2)
                v = F.linear(h, L.self_attn_v_proj).view(B, T, KV, hd).transpose(1, 2)
                kv_len = k.shape[-2]
                cos = self.cos_cached[:kv_len][position_ids].unsqueeze(1)
                sin = self.sin_cached[:kv_len][position_ids].unsqueeze(1)
                q, k = model.rotate(q, cos, sin), model.rotate(k, cos, sin)
                k = k[:, :, None].expand(B, KV, H // KV, kv_len, hd).reshape(B, H, kv_len, hd)
                v = v[:, :, None].expand(B, KV, H // KV, kv_len, hd).reshape(B, H, kv_len, hd)
                att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd) + bias
                ctx = torch.matmul(att.softmax(dim=-1), v).transpose(1, 2).reshape(B, T, H * hd)
                x = x + F.linear(ctx, L.self_attn_o_proj)
                h = model.rms(x, L.post_attention_layernorm)
                gate = F.silu(F.linear(h, L.mlp_gate_proj))
                x = x + F.linear(gate * F.linear(h, L.mlp_up_proj), L.mlp_down_proj)
            return F.linear(model.rms(x, self.norm), self.lm_head)

    os.makedirs(out_dir, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(model_dir, name)):
            shutil.copy(os.path.join(model_dir, name), out_dir)
    B, T = 2, 5
    args = (torch.ones(B, T, dtype=torch.long), torch.ones(B, T, dtype=torch.long),
            torch.arange(T).expand(B, T).contiguous())
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    with torch.no_grad():
        torch.onnx.export(Exported().eval(), args, os.path.join(out_dir, "model.onnx"), opset_version=17,
                          input_names=["input_ids", "attention_mask", "position_ids"], output_names=["logits"],
                          dynamic_axes=axes, do_constant_folding=True)


def batches(ids):
    """Length-sorted batches of BATCH rows: (row indices, input_ids, attention_mask, position_ids), left padded."""
    import torch

    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    for b in range(0, len(order), BATCH):
        rows = order[b:b + BATCH]
        T = max(len(ids[i]) for i in rows)
        inp = torch.zeros(len(rows), T, dtype=torch.long)
        mask = torch.zeros(len(rows), T, dtype=torch.long)
        for r, i in enumerate(rows):
            inp[r, T - len(ids[i]):] = torch.tensor(ids[i])
            mask[r, T - len(ids[i]):] = 1
        pos = (mask.cumsum(1) - 1).clamp_(min=0)
        yield rows, inp, mask, pos


def extract(model_dir, weights_dir, ids_path, out_dir):
    import torch

    t0 = time.perf_counter()
    torch.set_num_threads(THREADS)
    with open(ids_path, encoding="utf-8") as f:
        ids = json.load(f)["ids"]
    model = Llama(model_dir, weights_dir)
    keep = stored_layers(model.n_layers)
    states = {l: np.empty((len(ids), model.d), dtype=np.float16) for l in keep}
    with torch.inference_mode():
        for rows, inp, mask, pos in batches(ids):
            kept, _, _ = model.forward(inp, mask, pos, keep=set(keep))
            for l in keep:
                states[l][rows] = kept[l].numpy().astype(np.float16)
    os.makedirs(out_dir, exist_ok=True)
    for l in keep:
        np.save(os.path.join(out_dir, "L%03d.npy" % l), states[l])
    return report(len(ids), t0)


def generate(model_dir, weights_dir, ids_path, out_path, max_new):
    import torch

    t0 = time.perf_counter()
    torch.set_num_threads(THREADS)
    with open(ids_path, encoding="utf-8") as f:
        ids = json.load(f)["ids"]
    model = Llama(model_dir, weights_dir, lm_head=True)
    eos = torch.tensor(sorted(model.eos), dtype=torch.long)
    out = [None] * len(ids)
    with torch.inference_mode():
        for rows, inp, mask, pos in batches(ids):
            B = len(rows)
            tokens = [[] for _ in rows]
            done = torch.zeros(B, dtype=torch.bool)
            stopped = torch.zeros(B, dtype=torch.bool)
            _, x, cache = model.forward(inp, mask, pos)
            step_pos = pos[:, -1:]
            for step in range(max_new):
                nxt = torch.matmul(x[:, -1], model.lm_head.T).argmax(-1)
                hit = torch.isin(nxt, eos) & ~done
                for r in torch.nonzero(~done & ~hit).flatten().tolist():
                    tokens[r].append(int(nxt[r]))
                stopped |= hit
                done |= hit
                if bool(done.all()) or step == max_new - 1:
                    break
                # Finished rows keep decoding (their tokens are discarded), as HuggingFace's generate does.
                mask = torch.cat((mask, torch.ones(B, 1, dtype=torch.long)), dim=1)
                step_pos = step_pos + 1
                _, x, cache = model.forward(nxt[:, None], mask, step_pos, cache=cache)
            for r, i in enumerate(rows):
                out[i] = {"tokens": tokens[r], "eos": bool(stopped[r])}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return report(len(ids), t0)


def report(rows, t0):
    import resource

    secs = time.perf_counter() - t0
    return {"rows": rows, "seconds": secs, "rows_per_s": rows / secs, "threads": THREADS,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def compare(store, out_dir):
    with open(os.path.join(store, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    res = {"layers": {}, "within": True}
    for l in index["layers"]:
        h = np.load(os.path.join(store, "L%03d.npy" % l)).astype(np.float32)
        p = np.load(os.path.join(out_dir, "L%03d.npy" % l)).astype(np.float32)
        dev = np.abs(h - p)
        scale = np.sqrt((p * p).mean(1, keepdims=True))
        # Each side rounded float32 to float16 (half an ulp each: 2^-11 relative), after float32
        # arithmetic that differs in summation order (1e-4 of the row's scale allows for that).
        ok = dev <= 2.0 ** -10 * np.maximum(np.abs(h), np.abs(p)) + 1e-4 * scale + 2.0 ** -24
        big = np.abs(p) >= 2.0 ** -14
        res["layers"][l] = {"max_abs": float(dev.max()), "max_rel": float((dev[big] / np.abs(p[big])).max()),
                            "max_abs_over_row_scale": float((dev / scale).max()), "within": bool(ok.all())}
        res["within"] = res["within"] and bool(ok.all())
    return res


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "convert":
        convert(*args)
        return
    if mode == "export":
        export(*args)
        return
    if mode == "extract":
        r = extract(*args)
    elif mode == "generate":
        max_new = 24
        if "--max-new-tokens" in args:
            k = args.index("--max-new-tokens")
            max_new = int(args[k + 1])
            del args[k:k + 2]
        r = generate(*args, max_new)
    elif mode == "compare":
        r = compare(*args)
    else:
        sys.exit("unknown mode %s; expected convert, export, extract, generate or compare" % mode)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
