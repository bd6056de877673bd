"""Tiny decoders written in plain PyTorch as transformers writes them, exported
by torch.onnx.export without a KV cache (logits only), and their float64
greedy decoding: the graphs users export by hand, and their reference.

    torch_export.py export FAMILY DIR SEED [OPSET]
                                               writes DIR/model.onnx (DIR holds config.json) at
                                               OPSET (17; below 17 LayerNorm is written out)
    torch_export.py greedy FAMILY DIR SEED IDS MAX_NEW EOS
                                               prints the float64 greedy ids of each prompt in IDS (a JSON list)
    torch_export.py states FAMILY DIR SEED IDS
                                               prints the float64 states each block stores for each prompt in IDS

Families (FAMILIES; each class says how transformers writes it): llama and
its relatives mistral, qwen2, olmo, starcoder2, mixtral, phi3, stablelm, phi,
gemma (Gemma 2), olmo2 (OLMo 2), granite, cohere, qwen3 and gemma3_text
(Gemma 3), which override its steps; gpt2, gpt_neo, bloom, opt, neox, gptj,
codegen, falcon, gpt_bigcode and mpt. The weights are drawn from SEED, so
export and reference agree.
"""
import json
import math
import sys

import torch
from torch import nn


def cfg_of(d):
    with open(f"{d}/config.json") as f:
        return json.load(f)


def draws(g):
    """Draws from g: weights [out, in] scaled by their fan-in, biases, and norm weights near 1."""
    r = lambda *s: nn.Parameter(torch.randn(*s, generator=g, dtype=torch.float64) / math.sqrt(s[-1]))
    b = lambda n: nn.Parameter(0.1 * torch.randn(n, generator=g, dtype=torch.float64))
    w = lambda n: nn.Parameter(1 + 0.1 * torch.randn(n, generator=g, dtype=torch.float64))
    return r, b, w


def tied(g, V, d):
    """A token embedding the LM head also reads. Drawn as large as the blocks' outputs, it would hand each step's
    input token back as the largest logit, and greedy text would repeat one token whatever the cache holds."""
    return nn.Parameter(0.1 * torch.randn(V, d, generator=g, dtype=torch.float64))


def rotary_tables(module, base, dim, positions):
    """transformers' rotary tables as the module's buffers cos_cached and sin_cached, [positions, dim]."""
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    emb = torch.cat([torch.outer(torch.arange(positions, dtype=torch.float64), inv)] * 2, dim=-1)
    module.register_buffer("cos_cached", emb.cos(), persistent=False)
    module.register_buffer("sin_cached", emb.sin(), persistent=False)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def mask_bias(attention_mask, B, T, dt):
    """transformers' _prepare_4d_causal_attention_mask without a past: [B, 1, T, S], 0 where a query sees a key,
    the lowest float where it does not (the causal mask from torch.arange over T, the padding from the mask)."""
    lo = torch.finfo(dt).min
    causal = torch.full((T, T), lo, dtype=dt)
    cond = torch.arange(T)
    causal = causal.masked_fill(cond < (cond + 1).view(T, 1), 0.0)
    S = attention_mask.shape[1]
    inverted = 1.0 - attention_mask[:, None, None, :].expand(B, 1, T, S).to(dt)
    return causal[None, None] + inverted.masked_fill(inverted.bool(), lo)


class Llama(nn.Module):
    """transformers 4.36's Llama: RMSNorm, rotary tables sliced to the keys' length and indexed by position_ids,
    grouped-query attention, the causal mask from torch.arange over the query length plus the padding from
    attention_mask. Its relatives below override the steps where they differ."""

    TIED = False  # whether the LM head reads the token embedding

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
        self.H, self.KV, self.d = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"]), d
        self.hd = c.get("head_dim") or d // self.H
        self.c = c
        r, b, w = draws(g)
        self.embed = tied(g, V, d) if self.TIED else nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            self.make_layer(m, r, b, w, d, c["intermediate_size"])
            self.layers.append(m)
        self.make_head(r, b, w, d, V, g)
        self.make_rotary(c)
        self.eps = c.get("rms_norm_eps", 1e-5)

    def make_layer(self, m, r, b, w, d, inter):
        m.ln1, m.ln2 = w(d), w(d)
        m.q, m.k, m.v, m.o = r(self.H * self.hd, d), r(self.KV * self.hd, d), r(self.KV * self.hd, d), r(d, self.H * self.hd)
        m.gate, m.up, m.down = r(inter, d), r(inter, d), r(d, inter)

    def make_head(self, r, b, w, d, V, g):
        self.norm_w = nn.Parameter(torch.ones(d, dtype=torch.float64))
        self.head = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64) * 2 / math.sqrt(d))

    def make_rotary(self, c):
        rotary_tables(self, c["rope_theta"], self.hd, c["max_position_embeddings"])

    def norm(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def mask(self, attention_mask, B, T, dt):
        return mask_bias(attention_mask, B, T, dt)

    def qkv(self, m, h):
        return h @ m.q.T, h @ m.k.T, h @ m.v.T

    def rotary(self, kv_len, position_ids, dt):
        """cos and sin [B, 1, T, rotated features]: the cached tables sliced to the keys' length, indexed by positions."""
        cos = self.cos_cached[:kv_len].to(dt)[position_ids].unsqueeze(1)
        sin = self.sin_cached[:kv_len].to(dt)[position_ids].unsqueeze(1)
        return cos, sin

    def rotate(self, t, cos, sin):
        return t * cos + rotate_half(t) * sin

    def scores(self, i, q, k, bias):
        return q @ k.transpose(2, 3) / math.sqrt(self.hd) + bias

    def out(self, m, a):
        return a @ m.o.T

    def mlp(self, m, h):
        return (torch.nn.functional.silu(h @ m.gate.T) * (h @ m.up.T)) @ m.down.T

    def attention(self, i, m, h, bias, position_ids):
        B, T, _ = h.shape
        q, k, v = self.qkv(m, h)
        q = q.view(B, T, self.H, self.hd).transpose(1, 2)
        k = k.view(B, T, self.KV, self.hd).transpose(1, 2)
        v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
        kv_len = k.shape[-2]
        cos, sin = self.rotary(kv_len, position_ids, h.dtype)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        rep = self.H // self.KV
        k = k[:, :, None].expand(B, self.KV, rep, kv_len, self.hd).reshape(B, self.H, kv_len, self.hd)
        v = v[:, :, None].expand(B, self.KV, rep, kv_len, self.hd).reshape(B, self.H, kv_len, self.hd)
        a = torch.softmax(self.scores(i, q, k, bias), dim=-1) @ v
        return self.out(m, a.transpose(1, 2).reshape(B, T, -1))

    def block(self, i, m, x, bias, position_ids):
        x = x + self.attention(i, m, self.norm(x, m.ln1), bias, position_ids)
        return x + self.mlp(m, self.norm(x, m.ln2))

    def embeddings(self, input_ids):
        return self.embed[input_ids]

    def logits(self, x):
        return self.norm(x, self.norm_w) @ self.head.T

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        x = self.embeddings(input_ids)
        bias = self.mask(attention_mask, B, T, x.dtype)
        for i, m in enumerate(self.layers):
            x = self.block(i, m, x, bias, position_ids)
        return self.logits(x)


def sliding(causal, window, lo):
    """transformers' sliding-window mask on a causal mask without a past (`_make_causal_mask`'s `triu` of ones)."""
    context = 1 - torch.triu(torch.ones_like(causal, dtype=torch.int), diagonal=1 - window)
    return causal.masked_fill(context.bool(), lo)


def computed_rotary(inv_freq, position_ids, dt):
    """cos and sin [B, 1, T, dim] as transformers ≥ 4.40 computes them: inv_freq times position_ids, per call."""
    inv = inv_freq[None, :, None].to(dt).expand(position_ids.shape[0], -1, 1)
    freqs = (inv @ position_ids[:, None, :].to(dt)).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)


class Mistral(Llama):
    """transformers 4.36's Mistral: Llama with a sliding window on the causal mask (a `triu` over the query's square)."""

    SLIDING_WINDOW = 4096  # MistralConfig's default

    def mask(self, attention_mask, B, T, dt):
        lo = torch.finfo(dt).min
        causal = torch.full((T, T), lo, dtype=dt)
        cond = torch.arange(T)
        causal = sliding(causal.masked_fill(cond < (cond + 1).view(T, 1), 0.0), self.c.get("sliding_window", self.SLIDING_WINDOW), lo)
        S = attention_mask.shape[1]
        inverted = 1.0 - attention_mask[:, None, None, :].expand(B, 1, T, S).to(dt)
        return causal[None, None] + inverted.masked_fill(inverted.bool(), lo)


class Qwen2(Llama):
    """transformers 4.37's Qwen2: Llama with biases on q, k and v."""

    def make_layer(self, m, r, b, w, d, inter):
        super().make_layer(m, r, b, w, d, inter)
        m.qb, m.kb, m.vb = b(self.H * self.hd), b(self.KV * self.hd), b(self.KV * self.hd)

    def qkv(self, m, h):
        return h @ m.q.T + m.qb, h @ m.k.T + m.kb, h @ m.v.T + m.vb


class Olmo(Llama):
    """transformers 4.40's OLMo: Llama with layer norms that have neither weight nor bias. torch 1.13 cannot export
    `layer_norm` without a weight, so the weight is a constant of ones, as newer exporters write it."""

    def make_layer(self, m, r, b, w, d, inter):
        m.q, m.k, m.v, m.o = r(self.H * self.hd, d), r(self.KV * self.hd, d), r(self.KV * self.hd, d), r(d, d)
        m.gate, m.up, m.down = r(inter, d), r(inter, d), r(d, inter)
        m.ln1 = m.ln2 = None

    def make_head(self, r, b, w, d, V, g):
        self.norm_w = None
        self.head = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64) * 2 / math.sqrt(d))

    def norm(self, x, w):
        return torch.nn.functional.layer_norm(x, (self.d,), torch.ones(self.d, dtype=x.dtype), None, 1e-5)


class Starcoder2(Llama):
    """transformers 4.39's Starcoder2: layer norms with biases, biases on every projection, a GELU MLP, the head
    tied to the embeddings."""

    TIED = True

    def make_layer(self, m, r, b, w, d, inter):
        m.ln1, m.ln1b, m.ln2, m.ln2b = w(d), b(d), w(d), b(d)
        m.q, m.k, m.v, m.o = r(self.H * self.hd, d), r(self.KV * self.hd, d), r(self.KV * self.hd, d), r(d, d)
        m.qb, m.kb, m.vb, m.ob = b(self.H * self.hd), b(self.KV * self.hd), b(self.KV * self.hd), b(d)
        m.fc, m.fcb, m.proj, m.projb = r(inter, d), b(inter), r(d, inter), b(d)

    def make_head(self, r, b, w, d, V, g):
        self.norm_w, self.norm_b = w(d), b(d)

    def block(self, i, m, x, bias, position_ids):
        ln = lambda x, w, b: torch.nn.functional.layer_norm(x, (self.d,), w, b, self.c["norm_epsilon"])
        x = x + self.attention(i, m, ln(x, m.ln1, m.ln1b), bias, position_ids)
        return x + self.mlp(m, ln(x, m.ln2, m.ln2b))

    def qkv(self, m, h):
        return h @ m.q.T + m.qb, h @ m.k.T + m.kb, h @ m.v.T + m.vb

    def out(self, m, a):
        return a @ m.o.T + m.ob

    def mlp(self, m, h):
        return torch.nn.functional.gelu(h @ m.fc.T + m.fcb, approximate="tanh") @ m.proj.T + m.projb

    def logits(self, x):
        x = torch.nn.functional.layer_norm(x, (self.d,), self.norm_w, self.norm_b, self.c["norm_epsilon"])
        return x @ self.embed.T


class Mixtral(Llama):
    """transformers 4.36's Mixtral attention with its sparse MoE written densely: every expert runs, and the
    router's renormalised top-k weights (zero elsewhere) mix them. transformers' own loop reads the routing with
    `tolist()`, which a trace bakes into the graph; the dense form computes the same function and exports."""

    def make_layer(self, m, r, b, w, d, inter):
        m.ln1, m.ln2 = w(d), w(d)
        m.q, m.k, m.v, m.o = r(self.H * self.hd, d), r(self.KV * self.hd, d), r(self.KV * self.hd, d), r(d, d)
        E = self.c["num_local_experts"]
        m.router = r(E, d)
        m.experts = nn.ParameterList(p for _ in range(E) for p in (r(inter, d), r(inter, d), r(d, inter)))

    def mlp(self, m, h):
        B, T, d = h.shape
        x = h.view(-1, d)
        probs = torch.softmax(x @ m.router.T, dim=1)
        top, chosen = torch.topk(probs, self.c["num_experts_per_tok"], dim=-1)
        weights = torch.zeros_like(probs).scatter(1, chosen, top / top.sum(dim=-1, keepdim=True))
        out = 0
        for e in range(len(m.experts) // 3):
            w1, w3, w2 = m.experts[3 * e : 3 * e + 3]
            out = out + weights[:, e, None] * ((torch.nn.functional.silu(x @ w1.T) * (x @ w3.T)) @ w2.T)
        return out.view(B, T, d)


class Phi3(Llama):
    """transformers 4.40's Phi-3: q, k and v fused (cut at the heads' widths), gate and up fused (chunked), the
    long-RoPE scaled rotary embedding computed from position_ids (its factors chosen by the positions' maximum,
    which a trace bakes), and a sliding window on the causal mask."""

    def make_layer(self, m, r, b, w, d, inter):
        m.ln1, m.ln2 = w(d), w(d)
        m.qkv_w, m.o = r((self.H + 2 * self.KV) * self.hd, d), r(d, d)
        m.gate_up, m.down = r(2 * inter, d), r(d, inter)

    def make_rotary(self, c):
        self.register_buffer("exponents", torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd, persistent=False)

    SLIDING_WINDOW = 2047  # Phi3Config's default
    mask = Mistral.mask

    def qkv(self, m, h):
        fused = h @ m.qkv_w.T
        q_end, k_end = self.H * self.hd, (self.H + self.KV) * self.hd
        return fused[..., :q_end], fused[..., q_end:k_end], fused[..., k_end:]

    def rotary(self, kv_len, position_ids, dt):
        c = self.c
        scaling, original = c["rope_scaling"], c["original_max_position_embeddings"]
        seq_len = torch.max(position_ids) + 1
        factors = scaling["long_factor"] if seq_len > original else scaling["short_factor"]
        inv = 1.0 / (torch.tensor(factors, dtype=torch.float64) * c["rope_theta"] ** self.exponents)
        cos, sin = computed_rotary(inv, position_ids, dt)
        scale = c["max_position_embeddings"] / original
        f = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(original))
        return cos * f, sin * f

    def mlp(self, m, h):
        gate, up = (h @ m.gate_up.T).chunk(2, dim=-1)
        return (up * torch.nn.functional.silu(gate)) @ m.down.T


class StableLm(Llama):
    """transformers 4.38's StableLM: layer norms with biases, biases on q, k and v, rotary embeddings on the
    first partial_rotary_factor of each head (split off and joined back)."""

    def make_layer(self, m, r, b, w, d, inter):
        super().make_layer(m, r, b, w, d, inter)
        m.ln1b, m.ln2b = b(d), b(d)
        m.qb, m.kb, m.vb = b(self.H * self.hd), b(self.KV * self.hd), b(self.KV * self.hd)

    def make_head(self, r, b, w, d, V, g):
        super().make_head(r, b, w, d, V, g)
        self.norm_b = b(d)

    def make_rotary(self, c):
        self.rot = int(c["partial_rotary_factor"] * self.hd)
        rotary_tables(self, c["rope_theta"], self.rot, c["max_position_embeddings"])

    def ln(self, x, w, b):
        return torch.nn.functional.layer_norm(x, (self.d,), w, b, self.c["layer_norm_eps"])

    def block(self, i, m, x, bias, position_ids):
        x = x + self.attention(i, m, self.ln(x, m.ln1, m.ln1b), bias, position_ids)
        return x + self.mlp(m, self.ln(x, m.ln2, m.ln2b))

    qkv = Qwen2.qkv

    def rotate(self, t, cos, sin):
        rot = self.rot
        return torch.cat((t[..., :rot] * cos + rotate_half(t[..., :rot]) * sin, t[..., rot:]), dim=-1)

    def logits(self, x):
        return self.ln(x, self.norm_w, self.norm_b) @ self.head.T


class Phi(StableLm):
    """transformers 4.37's Phi: StableLM's partial rotary embeddings and biased layer norm, with a parallel block
    (attention and a GELU MLP read one norm), biases on the output projection and on the LM head."""

    def make_layer(self, m, r, b, w, d, inter):
        m.ln1, m.ln1b = w(d), b(d)
        m.q, m.k, m.v, m.o = r(self.H * self.hd, d), r(self.KV * self.hd, d), r(self.KV * self.hd, d), r(d, d)
        m.qb, m.kb, m.vb, m.ob = b(self.H * self.hd), b(self.KV * self.hd), b(self.KV * self.hd), b(d)
        m.fc, m.fcb, m.proj, m.projb = r(inter, d), b(inter), r(d, inter), b(d)

    def make_head(self, r, b, w, d, V, g):
        super().make_head(r, b, w, d, V, g)
        self.head_b = b(V)

    def block(self, i, m, x, bias, position_ids):
        h = self.ln(x, m.ln1, m.ln1b)
        return x + self.attention(i, m, h, bias, position_ids) + self.mlp(m, h)

    out = Starcoder2.out

    def mlp(self, m, h):
        return torch.nn.functional.gelu(h @ m.fc.T + m.fcb, approximate="tanh") @ m.proj.T + m.projb

    def logits(self, x):
        return super().logits(x) + self.head_b


class Gemma2(Llama):
    """transformers 4.44's Gemma 2: embeddings scaled by √d, RMSNorm by (1 + weight), norms before and after both
    attention and MLP, a GELU-gated MLP, queries scaled by query_pre_attn_scalar, scores soft-capped by tanh, a
    sliding window on every other layer (a `tril` of the 4-D mask), the rotary embedding computed from
    position_ids, and the logits soft-capped."""

    def make_layer(self, m, r, b, w, d, inter):
        super().make_layer(m, r, b, w, d, inter)
        m.ln3, m.ln4 = b(d), b(d)

    def make_rotary(self, c):
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def norm(self, x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * (1.0 + w)

    def rotary(self, kv_len, position_ids, dt):
        return computed_rotary(self.inv_freq, position_ids, dt)

    def embeddings(self, input_ids):
        x = self.embed[input_ids]
        return x * torch.tensor(self.d**0.5, dtype=x.dtype)

    def scores(self, i, q, k, bias):
        cap = self.c["attn_logit_softcapping"]
        s = torch.tanh((q @ k.transpose(2, 3)) * self.c["query_pre_attn_scalar"] ** -0.5 / cap) * cap
        if i % 2 == 0:
            window = torch.tril(torch.ones_like(bias, dtype=torch.bool), diagonal=-self.c["sliding_window"])
            bias = torch.where(window, torch.tensor(torch.finfo(bias.dtype).min, dtype=bias.dtype), bias)
        return s + bias[:, :, :, : k.shape[-2]]

    def mlp(self, m, h):
        return (torch.nn.functional.gelu(h @ m.gate.T, approximate="tanh") * (h @ m.up.T)) @ m.down.T

    def block(self, i, m, x, bias, position_ids):
        x = x + self.norm(self.attention(i, m, self.norm(x, m.ln1), bias, position_ids), m.ln2)
        return x + self.norm(self.mlp(m, self.norm(x, m.ln3)), m.ln4)

    def logits(self, x):
        cap = self.c["final_logit_softcapping"]
        return torch.tanh(super().logits(x) / cap) * cap


class Qwen3(Llama):
    """transformers 4.51's Qwen3: Llama without biases, head_dim from the config (its heads may be wider than
    hidden/heads), an RMSNorm over each head's queries and keys (q_norm, k_norm: one weight of head_dim) before the
    rotary embedding, which is computed from position_ids."""

    def make_layer(self, m, r, b, w, d, inter):
        super().make_layer(m, r, b, w, d, inter)
        m.qn, m.kn = w(self.hd), w(self.hd)

    make_rotary = Gemma2.make_rotary
    rotary = Gemma2.rotary

    def attention(self, i, m, h, bias, position_ids):
        B, T, _ = h.shape
        q, k, v = self.qkv(m, h)
        q = self.norm(q.view(B, T, self.H, self.hd), m.qn).transpose(1, 2)
        k = self.norm(k.view(B, T, self.KV, self.hd), m.kn).transpose(1, 2)
        v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
        return self.attend(i, m, q, k, v, bias, position_ids)

    def attend(self, i, m, q, k, v, bias, position_ids):
        """Llama's attention from the heads' queries, keys and values on: rotary, repeated heads, output projection."""
        B, _, T, _ = q.shape
        cos, sin = self.rotary(k.shape[-2], position_ids, q.dtype)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        rep, kv_len = self.H // self.KV, k.shape[-2]
        k = k[:, :, None].expand(B, self.KV, rep, kv_len, self.hd).reshape(B, self.H, kv_len, self.hd)
        v = v[:, :, None].expand(B, self.KV, rep, kv_len, self.hd).reshape(B, self.H, kv_len, self.hd)
        a = torch.softmax(self.scores(i, q, k, bias), dim=-1) @ v
        return self.out(m, a.transpose(1, 2).reshape(B, T, -1))


class Gemma3(Qwen3):
    """transformers 4.50's Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text): Gemma 2's block (four (1 + w)
    RMSNorms, GELU-gated MLP, embeddings scaled by √d, queries scaled by query_pre_attn_scalar) with Qwen3's
    per-head q_norm and k_norm (in the (1 + w) form), no soft-capping of scores or logits (both None in
    Gemma3TextConfig), the head tied to the embeddings, and local layers (all but every sliding_window_pattern-th)
    that attend within the sliding window and read a rotary table of base rope_local_base_freq; the global
    layers' table has base rope_theta."""

    TIED = True

    def make_layer(self, m, r, b, w, d, inter):
        Llama.make_layer(self, m, r, b, w, d, inter)
        m.ln3, m.ln4, m.qn, m.kn = b(d), b(d), b(self.hd), b(self.hd)

    def make_head(self, r, b, w, d, V, g):
        self.norm_w = b(d)

    def make_rotary(self, c):
        exps = torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd
        self.register_buffer("inv_freq", 1.0 / (c["rope_theta"] ** exps), persistent=False)
        self.register_buffer("inv_freq_local", 1.0 / (c["rope_local_base_freq"] ** exps), persistent=False)

    def sliding_layer(self, i):
        return bool((i + 1) % self.c["sliding_window_pattern"])

    norm = Gemma2.norm
    embeddings = Gemma2.embeddings
    mlp = Gemma2.mlp
    block = Gemma2.block

    def attend(self, i, m, q, k, v, bias, position_ids):
        self.local = self.sliding_layer(i)
        return super().attend(i, m, q, k, v, bias, position_ids)

    def rotary(self, kv_len, position_ids, dt):
        return computed_rotary(self.inv_freq_local if self.local else self.inv_freq, position_ids, dt)

    def scores(self, i, q, k, bias):
        s = (q @ k.transpose(2, 3)) * self.c["query_pre_attn_scalar"] ** -0.5
        if self.local:
            window = torch.tril(torch.ones_like(bias, dtype=torch.bool), diagonal=-self.c["sliding_window"])
            bias = torch.where(window, torch.tensor(torch.finfo(bias.dtype).min, dtype=bias.dtype), bias)
        return s + bias[:, :, :, : k.shape[-2]]

    def logits(self, x):
        return self.norm(x, self.norm_w) @ self.embed.T


class Gpt2(nn.Module):
    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["n_embd"], c["n_layer"]
        self.H, self.d = c["n_head"], d
        self.hd = d // self.H
        # Conv1D weights are [in, out]: scaled by their first axis.
        r = lambda *s: nn.Parameter(torch.randn(*s, generator=g, dtype=torch.float64) / math.sqrt(s[0]))
        _, b, _ = draws(g)
        self.wte = tied(g, V, d)
        self.wpe = nn.Parameter(0.1 * torch.randn(c["n_positions"], d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.ln1w, m.ln1b, m.ln2w, m.ln2b = nn.Parameter(torch.ones(d, dtype=torch.float64)), b(d), b(d), b(d)
            m.attn_w, m.attn_b, m.proj_w, m.proj_b = r(d, 3 * d), b(3 * d), r(d, d), b(d)
            m.fc_w, m.fc_b, m.out_w, m.out_b = r(d, 4 * d), b(4 * d), r(4 * d, d), b(d)
            self.layers.append(m)
        self.lnfw, self.lnfb = nn.Parameter(torch.ones(d, dtype=torch.float64)), b(d)
        n = c["n_positions"]
        self.register_buffer("bias", torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n), persistent=False)

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        x = self.wte[input_ids] + self.wpe[position_ids]
        dt = x.dtype
        lo = torch.finfo(dt).min
        pad = (1.0 - attention_mask[:, None, None, :].to(dt)) * lo
        ln = torch.nn.functional.layer_norm
        d = self.d
        for m in self.layers:
            h = ln(x, (d,), m.ln1w, m.ln1b, 1e-5)
            q, k, v = (h @ m.attn_w + m.attn_b).split(d, dim=2)
            q, k, v = (t.view(B, T, self.H, self.hd).permute(0, 2, 1, 3) for t in (q, k, v))
            s = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
            ql, kl = q.size(-2), k.size(-2)
            causal = self.bias[:, :, kl - ql : kl, :kl]
            s = torch.where(causal, s, torch.tensor(lo, dtype=dt)) + pad
            a = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, T, d)
            x = x + a @ m.proj_w + m.proj_b
            h = ln(x, (d,), m.ln2w, m.ln2b, 1e-5)
            x = x + torch.nn.functional.gelu(h @ m.fc_w + m.fc_b, approximate="tanh") @ m.out_w + m.out_b
        return ln(x, (d,), self.lnfw, self.lnfb, 1e-5) @ self.wte.T


class Bloom(nn.Module):
    """transformers 4.36's BLOOM: batch and heads merged into one axis ([B·H, T, hd], keys [B·H, hd, T]), the
    ALiBi biases from the mask's cumulative sum added by baddbmm, the causal mask as booleans."""

    INPUTS = ("input_ids", "attention_mask")

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["hidden_size"], c["n_layer"]
        self.H, self.d = c["n_head"], d
        self.hd = d // self.H
        r, b, w = draws(g)
        self.embed = tied(g, V, d)
        self.ln_e = nn.ParameterList((nn.Parameter(0.1 * w(d).detach()), b(d)))  # small, as tied() says
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.ln1w, m.ln1b, m.ln2w, m.ln2b = w(d), b(d), w(d), b(d)
            m.qkv_w, m.qkv_b, m.dense_w, m.dense_b = r(3 * d, d), b(3 * d), r(d, d), b(d)
            m.up_w, m.up_b, m.down_w, m.down_b = r(4 * d, d), b(4 * d), r(d, 4 * d), b(d)
            self.layers.append(m)
        self.lnf = nn.ParameterList((w(d), b(d)))
        self.eps = c["layer_norm_epsilon"]
        n = 2 ** math.floor(math.log2(self.H))
        base = torch.tensor(2 ** (-(2 ** -(math.log2(n) - 3))), dtype=torch.float32)
        slopes = torch.pow(base, torch.arange(1, 1 + n, dtype=torch.int32))
        if n != self.H:
            extra = torch.tensor(2 ** (-(2 ** -(math.log2(2 * n) - 3))), dtype=torch.float32)
            k = min(n, self.H - n)
            slopes = torch.cat([slopes, torch.pow(extra, torch.arange(1, 1 + 2 * k, 2, dtype=torch.int32))])
        self.register_buffer("slopes", slopes.double(), persistent=False)

    def forward(self, input_ids, attention_mask):
        B, T = input_ids.shape
        H, hd, d = self.H, self.hd, self.d
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), p[0], p[1], self.eps)
        x = ln(self.embed[input_ids], self.ln_e)
        dt = x.dtype
        S = attention_mask.shape[1]
        index = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
        alibi = (self.slopes.to(dt)[..., None] * index).reshape(B * H, 1, S)
        lo = torch.finfo(dt).min
        masked = mask_bias(attention_mask, B, T, dt).bool()
        for m in self.layers:
            h = ln(x, (m.ln1w, m.ln1b))
            fused = (h @ m.qkv_w.T + m.qkv_b).view(B, T, H, 3, hd)
            q = fused[..., 0, :].transpose(1, 2).reshape(B * H, T, hd)
            k = fused[..., 1, :].permute(0, 2, 3, 1).reshape(B * H, hd, T)
            v = fused[..., 2, :].transpose(1, 2).reshape(B * H, T, hd)
            s = alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=1 / math.sqrt(hd)).view(B, H, T, -1)
            s = torch.masked_fill(s, masked, lo)
            p = torch.softmax(s, dim=-1).view(B * H, T, -1)
            a = torch.bmm(p, v).view(B, H, T, hd).permute(0, 2, 1, 3).reshape(B, T, d)
            x = x + a @ m.dense_w.T + m.dense_b
            h = ln(x, (m.ln2w, m.ln2b))
            u = h @ m.up_w.T + m.up_b
            u = u * 0.5 * (1.0 + torch.tanh(0.79788456 * u * (1 + 0.044715 * u * u)))
            x = x + u @ m.down_w.T + m.down_b
        return ln(x, self.lnf) @ self.embed.T


class Opt(nn.Module):
    """transformers 4.36's OPT: positions counted from the mask's cumulative sum (offset 2), the query scaled
    before its product, batch and heads merged ([B·H, S, hd] keys, transposed for the product), bmm and softmax."""

    INPUTS = ("input_ids", "attention_mask")

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
        self.H, self.d = c["num_attention_heads"], d
        self.hd = d // self.H
        ffn = c["ffn_dim"]
        r, b, w = draws(g)
        self.embed = tied(g, V, d)
        self.pos = nn.Parameter(0.1 * torch.randn(c["max_position_embeddings"] + 2, d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.ln1w, m.ln1b, m.ln2w, m.ln2b = w(d), b(d), w(d), b(d)
            m.q_w, m.q_b, m.k_w, m.k_b = r(d, d), b(d), r(d, d), b(d)
            m.v_w, m.v_b, m.o_w, m.o_b = r(d, d), b(d), r(d, d), b(d)
            m.fc1_w, m.fc1_b, m.fc2_w, m.fc2_b = r(ffn, d), b(ffn), r(d, ffn), b(d)
            self.layers.append(m)
        self.lnf = nn.ParameterList((w(d), b(d)))

    def forward(self, input_ids, attention_mask):
        B, T = input_ids.shape
        H, hd, d = self.H, self.hd, self.d
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), p[0], p[1], 1e-5)
        positions = (torch.cumsum(attention_mask, dim=1).type_as(attention_mask) * attention_mask).long() - 1
        x = self.embed[input_ids] + self.pos[positions + 2]
        dt = x.dtype
        lo = torch.finfo(dt).min
        bias = mask_bias(attention_mask, B, T, dt)
        heads = lambda t: t.view(B, -1, H, hd).transpose(1, 2).contiguous()
        for m in self.layers:
            h = ln(x, (m.ln1w, m.ln1b))
            q = heads((h @ m.q_w.T + m.q_b) * hd**-0.5).view(B * H, -1, hd)
            k = heads(h @ m.k_w.T + m.k_b).reshape(B * H, -1, hd)
            v = heads(h @ m.v_w.T + m.v_b).reshape(B * H, -1, hd)
            s = torch.bmm(q, k.transpose(1, 2))
            s = s.view(B, H, T, -1) + bias
            s = torch.max(s, torch.tensor(lo, dtype=dt)).view(B * H, T, -1)
            a = torch.bmm(torch.softmax(s, dim=-1), v).view(B, H, T, hd).transpose(1, 2).reshape(B, T, d)
            x = x + a @ m.o_w.T + m.o_b
            h = ln(x, (m.ln2w, m.ln2b))
            x = x + torch.relu(h @ m.fc1_w.T + m.fc1_b) @ m.fc2_w.T + m.fc2_b
        return ln(x, self.lnf) @ self.embed.T


class Neox(nn.Module):
    """transformers 4.36's GPT-NeoX: q, k and v fused per head ([B, T, H, 3·hd]), rotary embeddings on the first
    quarter of each head (tables sliced to the keys' length), keys viewed [B·H, S, hd] for baddbmm, the causal
    mask sliced from a buffer at the keys' length, parallel residual blocks."""

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
        self.H, self.d = c["num_attention_heads"], d
        self.hd = d // self.H
        self.rot = int(self.hd * c.get("rotary_pct", 0.25))
        inter = c["intermediate_size"]
        r, b, w = draws(g)
        self.embed = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.ln1w, m.ln1b, m.ln2w, m.ln2b = w(d), b(d), w(d), b(d)
            m.qkv_w, m.qkv_b, m.dense_w, m.dense_b = r(3 * d, d), b(3 * d), r(d, d), b(d)
            m.up_w, m.up_b, m.down_w, m.down_b = r(inter, d), b(inter), r(d, inter), b(d)
            self.layers.append(m)
        self.lnf = nn.ParameterList((w(d), b(d)))
        self.head = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64) * 2 / math.sqrt(d))
        base = c.get("rotary_emb_base", c.get("rope_theta", 10000))
        rotary_tables(self, base, self.rot, c["max_position_embeddings"])
        n = c["max_position_embeddings"]
        self.register_buffer("bias", torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n), persistent=False)

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        H, hd, d, rot = self.H, self.hd, self.d, self.rot
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), p[0], p[1], 1e-5)
        x = self.embed[input_ids]
        dt = x.dtype
        lo = torch.finfo(dt).min
        pad = (1.0 - attention_mask[:, None, None, :].to(dt)) * lo
        for m in self.layers:
            h = ln(x, (m.ln1w, m.ln1b))
            qkv = (h @ m.qkv_w.T + m.qkv_b).view(B, T, H, 3 * hd)
            q = qkv[..., :hd].permute(0, 2, 1, 3)
            k = qkv[..., hd : 2 * hd].permute(0, 2, 1, 3)
            v = qkv[..., 2 * hd :].permute(0, 2, 1, 3)
            seq_len = k.shape[-2]
            cos = self.cos_cached[:seq_len].to(dt)[position_ids].unsqueeze(1)
            sin = self.sin_cached[:seq_len].to(dt)[position_ids].unsqueeze(1)
            q = torch.cat((q[..., :rot] * cos + rotate_half(q[..., :rot]) * sin, q[..., rot:]), dim=-1)
            k = torch.cat((k[..., :rot] * cos + rotate_half(k[..., :rot]) * sin, k[..., rot:]), dim=-1)
            kl = k.size(-2)
            causal = self.bias[:, :, kl - T : kl, :kl]
            qm = q.view(B * H, T, hd)
            km = k.view(B * H, kl, hd)
            s = torch.zeros(B * H, T, kl, dtype=dt)
            s = torch.baddbmm(s, qm, km.transpose(1, 2), beta=1.0, alpha=1 / math.sqrt(hd)).view(B, H, T, kl)
            s = torch.where(causal, s, torch.tensor(lo, dtype=dt)) + pad
            a = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, T, d)
            u = ln(x, (m.ln2w, m.ln2b)) @ m.up_w.T + m.up_b
            mlp = torch.nn.functional.gelu(u) @ m.down_w.T + m.down_b
            x = x + a @ m.dense_w.T + m.dense_b + mlp
        return ln(x, self.lnf) @ self.head.T


class Gptj(nn.Module):
    """transformers 4.36's GPT-J: interleaved rotary embeddings on the first rotary_dim features of each head
    (sin and cos gathered by position_ids from one table), the heads permuted after them, the causal mask sliced
    from a buffer at the keys' length, parallel blocks, an LM head with a bias."""

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["n_embd"], c["n_layer"]
        self.H, self.d = c["n_head"], d
        self.hd = d // self.H
        self.rot = c["rotary_dim"] or self.hd
        inner = c.get("n_inner") or 4 * d
        r, b, w = draws(g)
        self.embed = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.lnw, m.lnb = w(d), b(d)
            m.q, m.k, m.v, m.o = r(d, d), r(d, d), r(d, d), r(d, d)
            m.fc_w, m.fc_b, m.out_w, m.out_b = r(inner, d), b(inner), r(d, inner), b(d)
            self.layers.append(m)
        self.lnf = nn.ParameterList((w(d), b(d)))
        self.head = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64) * 2 / math.sqrt(d))
        self.head_b = b(V)
        n = c["n_positions"]
        inv = 1.0 / (10000 ** (torch.arange(0, self.rot, 2, dtype=torch.float64) / self.rot))
        angles = torch.einsum("i,j->ij", torch.arange(n, dtype=torch.float64), inv)
        self.register_buffer("embed_positions", torch.cat((angles.sin(), angles.cos()), dim=1), persistent=False)
        self.register_buffer("bias", torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n), persistent=False)

    @staticmethod
    def rotate_every_two(x):
        return torch.stack((-x[:, :, :, 1::2], x[:, :, :, ::2]), dim=-1).flatten(-2)

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        H, hd, d, rot = self.H, self.hd, self.d, self.rot
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), p[0], p[1], 1e-5)
        x = self.embed[input_ids]
        dt = x.dtype
        lo = torch.finfo(dt).min
        pad = (1.0 - attention_mask[:, None, None, :].to(dt)) * lo
        table = self.embed_positions.to(dt)
        sincos = torch.gather(table.unsqueeze(0).repeat(B, 1, 1), 1, position_ids.unsqueeze(-1).repeat(1, 1, rot))
        sin, cos = torch.split(sincos, rot // 2, dim=-1)
        sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
        for m in self.layers:
            h = ln(x, (m.lnw, m.lnb))
            q = (h @ m.q.T).view(B, T, H, hd)
            k = (h @ m.k.T).view(B, T, H, hd)
            v = (h @ m.v.T).view(B, T, H, hd).permute(0, 2, 1, 3)
            q = torch.cat([q[..., :rot] * cos + self.rotate_every_two(q[..., :rot]) * sin, q[..., rot:]], dim=-1)
            k = torch.cat([k[..., :rot] * cos + self.rotate_every_two(k[..., :rot]) * sin, k[..., rot:]], dim=-1)
            q, k = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3)
            kl = k.size(-2)
            causal = self.bias[:, :, kl - T : kl, :kl]
            s = torch.where(causal, q @ k.transpose(-1, -2), torch.tensor(lo, dtype=dt)) / math.sqrt(hd) + pad
            a = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, T, d)
            u = h @ m.fc_w.T + m.fc_b
            x = x + a @ m.o.T + torch.nn.functional.gelu(u, approximate="tanh") @ m.out_w.T + m.out_b
        return ln(x, self.lnf) @ self.head.T + self.head_b


class Falcon(nn.Module):
    """transformers 4.36's Falcon-7B (multi_query, parallel_attn, the eager path): one key/value head cut from the
    fused projection viewed [B, T, H + 2, hd] by a list index, broadcast against every query head by the product,
    rotary tables sliced to the keys' length, attention and MLP reading one layer norm."""

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
        self.H, self.d = c["num_attention_heads"], d
        self.hd = d // self.H
        ffn = c["ffn_hidden_size"]
        r, b, w = draws(g)
        self.embed = tied(g, V, d)
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.lnw, m.lnb = w(d), b(d)
            m.qkv, m.dense = r((self.H + 2) * self.hd, d), r(d, d)
            m.up, m.down = r(ffn, d), r(d, ffn)
            self.layers.append(m)
        self.lnf = nn.ParameterList((w(d), b(d)))
        rotary_tables(self, c["rope_theta"], self.hd, c["max_position_embeddings"])
        self.eps = c["layer_norm_epsilon"]

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        H, hd, d = self.H, self.hd, self.d
        x = self.embed[input_ids]
        dt = x.dtype
        bias = mask_bias(attention_mask, B, T, dt)
        for m in self.layers:
            h = torch.nn.functional.layer_norm(x, (d,), m.lnw, m.lnb, self.eps)
            fused = (h @ m.qkv.T).view(B, T, H + 2, hd)
            q = fused[..., :-2, :].transpose(1, 2).reshape(B, H, T, hd)
            k = fused[..., [-2], :].transpose(1, 2).reshape(B, 1, T, hd)
            v = fused[..., [-1], :].transpose(1, 2).reshape(B, 1, T, hd)
            kv_len = k.shape[-2]
            cos = self.cos_cached[:kv_len].to(dt)[position_ids].unsqueeze(1)
            sin = self.sin_cached[:kv_len].to(dt)[position_ids].unsqueeze(1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            s = q @ k.transpose(-1, -2) / math.sqrt(hd)
            a = (torch.softmax(s + bias, dim=-1) @ v).view(B, H, T, hd).permute(0, 2, 1, 3).reshape(B, T, d)
            mlp = torch.nn.functional.gelu(h @ m.up.T) @ m.down.T
            x = x + a @ m.dense.T + mlp
        return torch.nn.functional.layer_norm(x, (d,), self.lnf[0], self.lnf[1], self.eps) @ self.embed.T


class GptBigcode(nn.Module):
    """transformers 4.36's GPT-BigCode with multi_query: one key/value head split from the fused projection
    ([B, S, hd], no heads' axis), the queries viewed [B, T·H, hd] for baddbmm and the scores [B, T, H, S] for the
    causal buffer sliced at the keys' length, learned positions."""

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["n_embd"], c["n_layer"]
        self.H, self.d = c["n_head"], d
        self.hd = d // self.H
        inner = c.get("n_inner") or 4 * d
        r, b, w = draws(g)
        self.wte = tied(g, V, d)
        self.wpe = nn.Parameter(0.1 * torch.randn(c["n_positions"], d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.ln1w, m.ln1b, m.ln2w, m.ln2b = w(d), b(d), w(d), b(d)
            m.attn_w, m.attn_b, m.proj_w, m.proj_b = r(d + 2 * self.hd, d), b(d + 2 * self.hd), r(d, d), b(d)
            m.fc_w, m.fc_b, m.out_w, m.out_b = r(inner, d), b(inner), r(d, inner), b(d)
            self.layers.append(m)
        self.lnf = nn.ParameterList((w(d), b(d)))
        n = c["n_positions"]
        self.register_buffer("bias", torch.tril(torch.ones(n, n, dtype=torch.bool)), persistent=False)

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        H, hd, d = self.H, self.hd, self.d
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), p[0], p[1], 1e-5)
        x = self.wte[input_ids] + self.wpe[position_ids]
        dt = x.dtype
        lo = torch.finfo(dt).min
        S = attention_mask.shape[1]
        for m in self.layers:
            h = ln(x, (m.ln1w, m.ln1b))
            q, kv = (h @ m.attn_w.T + m.attn_b).split((d, 2 * hd), dim=2)
            k, v = kv.split((hd, hd), dim=-1)
            k = k.transpose(-1, -2)
            kl = k.size(-1)
            keep = self.bias[None, kl - T : kl, :kl] * attention_mask.bool().view(B, 1, -1)
            keep = keep.unsqueeze(2)
            qv = q.reshape(B, T * H, hd)
            s = torch.zeros(B, T * H, kl, dtype=dt)
            s = torch.baddbmm(s, qv, k, beta=0, alpha=1 / math.sqrt(hd)).view(B, T, H, kl)
            s = torch.where(keep, s, torch.tensor(lo, dtype=dt))
            p = torch.softmax(s, dim=-1)
            a = torch.bmm(p.view(B, T * H, kl), v).view(B, T, d)
            x = x + a @ m.proj_w.T + m.proj_b
            h = ln(x, (m.ln2w, m.ln2b))
            x = x + torch.nn.functional.gelu(h @ m.fc_w.T + m.fc_b, approximate="tanh") @ m.out_w.T + m.out_b
        return ln(x, self.lnf) @ self.wte.T


class Codegen(Gptj):
    """transformers 4.36's CodeGen: GPT-J's interleaved partial rotary embeddings and parallel block, with q, v
    and k fused in one projection laid out for mp_num = 4 model-parallel shards (each shard's queries, values
    and keys side by side), the scores divided after the product, an LM head with a bias."""

    MP = 4

    def __init__(self, c, g):
        super().__init__(c, g)
        for m in self.layers:
            fused = torch.cat((m.q, m.v, m.k)).view(3, self.MP, -1, self.d).transpose(0, 1).reshape(-1, self.d)
            del m.q, m.k, m.v
            m.qkv = nn.Parameter(fused.detach())

    def split_heads(self, x):
        B, T = x.shape[:2]
        return x.reshape(B, T, self.MP, self.H // self.MP, self.hd).reshape(B, T, -1, self.hd)

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        H, hd, d, rot = self.H, self.hd, self.d, self.rot
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), p[0], p[1], 1e-5)
        x = self.embed[input_ids]
        dt = x.dtype
        lo = torch.finfo(dt).min
        pad = (1.0 - attention_mask.view(B, -1)[:, None, None, :].to(dt)) * lo
        table = self.embed_positions.to(dt).repeat(B, 1, 1)
        sincos = torch.gather(table, 1, position_ids.unsqueeze(-1).repeat(1, 1, table.shape[-1]))
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
        for m in self.layers:
            h = ln(x, (m.lnw, m.lnb))
            qkv = (h @ m.qkv.T).reshape(B, T, self.MP, -1)
            q, v, k = torch.split(qkv, hd * H // self.MP, dim=-1)
            q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v).permute(0, 2, 1, 3)
            q = torch.cat([q[..., :rot] * cos + self.rotate_every_two(q[..., :rot]) * sin, q[..., rot:]], dim=-1)
            k = torch.cat([k[..., :rot] * cos + self.rotate_every_two(k[..., :rot]) * sin, k[..., rot:]], dim=-1)
            q, k = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3)
            kl, ql = k.size(-2), q.size(-2)
            causal = self.bias[:, :, kl - ql : kl, :kl]
            s = (q @ k.transpose(-1, -2)) / torch.sqrt(torch.tensor(hd, dtype=dt))
            s = torch.where(causal, s, torch.tensor(lo, dtype=dt)) + pad
            a = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, T, d)
            u = h @ m.fc_w.T + m.fc_b
            x = x + a @ m.o.T + torch.nn.functional.gelu(u, approximate="tanh") @ m.out_w.T + m.out_b
        return ln(x, self.lnf) @ self.head.T + self.head_b


class GptNeo(nn.Module):
    """transformers 4.36's GPT-Neo: learned positions, unscaled scores, global and local layers alternating (the
    local ones' causal buffer with the window cut out by an XOR of `tril`s), both sliced at the keys' length, a
    bias on the output projection only, the head tied to the embeddings."""

    def __init__(self, c, g):
        super().__init__()
        V, d = c["vocab_size"], c["hidden_size"]
        self.H, self.d = c["num_heads"], d
        self.hd = d // self.H
        inner = c.get("intermediate_size") or 4 * d
        r, b, w = draws(g)
        self.wte = tied(g, V, d)
        self.wpe = nn.Parameter(0.1 * torch.randn(c["max_position_embeddings"], d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        self.kinds = c["attention_layers"]
        for _ in self.kinds:
            m = nn.Module()
            m.ln1w, m.ln1b, m.ln2w, m.ln2b = w(d), b(d), w(d), b(d)
            # Unscaled scores: queries drawn smaller so the softmax is not one-hot.
            m.q, m.k, m.v, m.o, m.ob = nn.Parameter(r(d, d) / math.sqrt(self.hd)), r(d, d), r(d, d), r(d, d), b(d)
            m.fc_w, m.fc_b, m.out_w, m.out_b = r(inner, d), b(inner), r(d, inner), b(d)
            self.layers.append(m)
        self.lnf = nn.ParameterList((w(d), b(d)))
        n = c["max_position_embeddings"]
        full = torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n)
        self.register_buffer("global_bias", full, persistent=False)
        local = torch.bitwise_xor(full, torch.tril(full, -c["window_size"]))
        self.register_buffer("local_bias", local, persistent=False)

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        H, hd, d = self.H, self.hd, self.d
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), p[0], p[1], 1e-5)
        x = self.wte[input_ids] + self.wpe[position_ids]
        dt = x.dtype
        lo = torch.finfo(dt).min
        bias = mask_bias(attention_mask, B, T, dt)
        heads = lambda t: t.view(B, T, H, hd).permute(0, 2, 1, 3)
        for kind, m in zip(self.kinds, self.layers):
            h = ln(x, (m.ln1w, m.ln1b))
            q, k, v = heads(h @ m.q.T), heads(h @ m.k.T), heads(h @ m.v.T)
            ql, kl = q.size(-2), k.size(-2)
            buffer = self.local_bias if kind == "local" else self.global_bias
            causal = buffer[:, :, kl - ql : kl, :kl]
            s = torch.where(causal, q @ k.transpose(-1, -2), torch.tensor(lo, dtype=dt)) + bias
            a = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, T, d)
            x = x + a @ m.o.T + m.ob
            h = ln(x, (m.ln2w, m.ln2b))
            x = x + torch.nn.functional.gelu(h @ m.fc_w.T + m.fc_b, approximate="tanh") @ m.out_w.T + m.out_b
        return ln(x, self.lnf) @ self.wte.T


class Mpt(nn.Module):
    """transformers 4.36's MPT: no positions but ALiBi biases [H, 1, max_seq_len] built in the forward pass and
    sliced by Python's max() over the keys' and queries' lengths (the key slice stays a traced expression, the
    query slice becomes 0), q, k and v fused and chunked, the 4-D mask as booleans, layer norms without biases."""

    INPUTS = ("input_ids", "attention_mask")

    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["d_model"], c["n_layers"]
        self.H, self.d = c["n_heads"], d
        self.hd = d // self.H
        self.c = c
        inner = c["expansion_ratio"] * d
        r, b, w = draws(g)
        self.wte = tied(g, V, d)
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.ln1, m.ln2 = w(d), w(d)
            m.wqkv, m.o = r(3 * d, d), r(d, d)
            m.up, m.down = r(inner, d), r(d, inner)
            self.layers.append(m)
        self.lnf = w(d)

    def alibi(self, n, dt):
        H, most = self.H, self.c["attn_config"]["alibi_bias_max"]
        alibi = torch.arange(1 - n, 1, dtype=torch.int32).view(1, 1, 1, n)
        p2 = 2 ** math.ceil(math.log2(H))
        base = torch.arange(1, p2 + 1, dtype=torch.int64).to(dt) * (most / p2)
        slopes = (1.0 / torch.pow(2, base)).view(1, p2, 1, 1)
        if p2 != H:
            slopes = torch.concat([slopes[:, 1::2, ...], slopes[:, ::2, ...]], dim=1)[:, :H, ...]
        return (alibi * slopes).squeeze(0)

    def forward(self, input_ids, attention_mask):
        B, T = input_ids.shape
        H, hd, d = self.H, self.hd, self.d
        ln = lambda x, w: torch.nn.functional.layer_norm(x, (d,), w, None, self.c["layer_norm_epsilon"])
        x = self.wte[input_ids]
        dt = x.dtype
        lo = torch.finfo(dt).min
        position_bias = self.alibi(self.c["max_seq_len"], dt)
        masked = mask_bias(attention_mask, B, T, dt).bool()
        for m in self.layers:
            q, k, v = (ln(x, m.ln1) @ m.wqkv.T).chunk(3, dim=2)
            q, k, v = (t.reshape(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
            s = torch.matmul(q, k.transpose(-1, -2)) * (1 / math.sqrt(hd))
            key_length = k.shape[-2]
            bias = position_bias[:, max(0, position_bias.size(1) - T) :, max(0, position_bias.size(2) - key_length) :]
            s = (s + bias).masked_fill(masked, lo)
            a = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).contiguous().view(B, T, -1)
            x = x + a @ m.o.T
            x = x + torch.nn.functional.gelu(ln(x, m.ln2) @ m.up.T) @ m.down.T
        return ln(x, self.lnf) @ self.wte.T


class Olmo2(Llama):
    """transformers 4.47's OLMo 2: norms after attention and after the MLP, none before (`h = x + norm(attn(x))`),
    RMSNorm of the whole q and k projections (q_norm as wide as the queries, k_norm as the keys) before the heads
    are split and rotated, the rotary embedding computed from position_ids."""

    def make_layer(self, m, r, b, w, d, inter):
        super().make_layer(m, r, b, w, d, inter)
        m.qn, m.kn = w(self.H * self.hd), w(self.KV * self.hd)

    make_rotary = Gemma2.make_rotary
    rotary = Gemma2.rotary

    def qkv(self, m, h):
        return self.norm(h @ m.q.T, m.qn), self.norm(h @ m.k.T, m.kn), h @ m.v.T

    def block(self, i, m, x, bias, position_ids):
        x = x + self.norm(self.attention(i, m, x, bias, position_ids), m.ln1)
        return x + self.norm(self.mlp(m, x), m.ln2)


class Granite(Llama):
    """transformers 4.45's Granite: Llama with scalar multipliers: the embeddings times embedding_multiplier, the
    scores times attention_multiplier (in place of 1/√head_dim), each branch times residual_multiplier before its
    residual Add, the logits divided by logits_scaling; the rotary embedding computed from position_ids."""

    make_rotary = Gemma2.make_rotary
    rotary = Gemma2.rotary

    def embeddings(self, input_ids):
        return self.embed[input_ids] * self.c["embedding_multiplier"]

    def scores(self, i, q, k, bias):
        return q @ k.transpose(2, 3) * self.c["attention_multiplier"] + bias

    def block(self, i, m, x, bias, position_ids):
        s = self.c["residual_multiplier"]
        x = x + self.attention(i, m, self.norm(x, m.ln1), bias, position_ids) * s
        return x + self.mlp(m, self.norm(x, m.ln2)) * s

    def logits(self, x):
        return super().logits(x) / self.c["logits_scaling"]


class Cohere(Llama):
    """transformers 4.40's Cohere (Command-R): a parallel block (`x + attn(ln(x)) + mlp(ln(x))`) on one LayerNorm
    without bias written out (mean, variance, rsqrt), the rotary embedding computed from position_ids with its
    frequencies repeated pairwise and rotated interleaved (each even feature with the odd one after it), the
    logits times logit_scale, the head tied to the embeddings. transformers repeats the frequencies with
    `repeat_interleave`, which torch 1.13 exports with the traced batch's shapes baked in; stacking each frequency
    with itself and flattening repeats them alike, as newer exporters write `repeat_interleave`."""

    TIED = True

    def make_layer(self, m, r, b, w, d, inter):
        super().make_layer(m, r, b, w, d, inter)
        del m.ln2

    def make_head(self, r, b, w, d, V, g):
        self.norm_w = w(d)

    make_rotary = Gemma2.make_rotary

    def norm(self, x, w):
        mean = x.mean(-1, keepdim=True)
        variance = (x - mean).pow(2).mean(-1, keepdim=True)
        return w * ((x - mean) * torch.rsqrt(variance + self.c["layer_norm_eps"]))

    def rotary(self, kv_len, position_ids, dt):
        inv = self.inv_freq[None, :, None].to(dt).expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].to(dt)).transpose(1, 2)
        emb = torch.stack((freqs, freqs), dim=-1).flatten(-2)
        return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)

    def rotate(self, t, cos, sin):
        rotated = torch.stack([-t[..., 1::2], t[..., ::2]], dim=-1).flatten(-2)
        return t * cos + rotated * sin

    def block(self, i, m, x, bias, position_ids):
        h = self.norm(x, m.ln1)
        return x + self.attention(i, m, h, bias, position_ids) + self.mlp(m, h)

    def logits(self, x):
        return (self.norm(x, self.norm_w) @ self.embed.T) * self.c["logit_scale"]


FAMILIES = {"llama": Llama, "mistral": Mistral, "qwen2": Qwen2, "olmo": Olmo, "starcoder2": Starcoder2,
            "mixtral": Mixtral, "phi3": Phi3, "stablelm": StableLm, "phi": Phi, "gemma": Gemma2, "gpt2": Gpt2,
            "bloom": Bloom, "opt": Opt, "neox": Neox, "gptj": Gptj, "codegen": Codegen, "falcon": Falcon,
            "gpt_bigcode": GptBigcode, "gpt_neo": GptNeo, "mpt": Mpt, "olmo2": Olmo2, "granite": Granite,
            "cohere": Cohere, "qwen3": Qwen3, "gemma3_text": Gemma3}


def build(family, d, seed):
    g = torch.Generator().manual_seed(int(seed))
    return FAMILIES[family](cfg_of(d), g).eval()


def export(family, d, seed, opset="17"):
    m = build(family, d, seed).float()
    B, T = 2, 5
    ids = torch.ones(B, T, dtype=torch.long)
    mask = torch.ones(B, T, dtype=torch.long)
    pos = torch.arange(T).expand(B, T).contiguous()
    names = getattr(m, "INPUTS", ("input_ids", "attention_mask", "position_ids"))
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    with torch.no_grad():
        torch.onnx.export(m, (ids, mask, pos)[: len(names)], f"{d}/model.onnx", opset_version=int(opset),
                          input_names=list(names), output_names=["logits"],
                          dynamic_axes={k: v for k, v in axes.items() if k in names or k == "logits"},
                          do_constant_folding=True)


def greedy(family, d, seed, ids_path, max_new, eos):
    m = build(family, d, seed)
    torch.set_num_threads(1)
    with open(ids_path) as f:
        prompts = json.load(f)
    out = []
    with torch.inference_mode():
        for p in prompts:
            seq, gen = list(p), []
            for _ in range(int(max_new)):
                T = len(seq)
                args = (torch.tensor([seq]), torch.ones(1, T, dtype=torch.long), torch.arange(T)[None])
                logits = m(*args[: len(getattr(m, "INPUTS", args))])[0, -1]
                t = int(torch.argmax(logits))
                gen.append(t)
                seq.append(t)
                if t == int(eos):
                    break
            out.append(gen)
    print(json.dumps(out))


def states(family, d, seed, ids_path):
    """Prints each prompt's float64 states at its last token, one per block ([prompt][block][feature]): the block's
    output, the last one after the final norm (HuggingFace's hidden_states[1:]). For the Llama-shaped modules whose
    final norm is `norm(x, norm_w)`."""
    m = build(family, d, seed)
    with open(ids_path) as f:
        prompts = json.load(f)
    out = []
    with torch.inference_mode():
        for p in prompts:
            T = len(p)
            x = m.embeddings(torch.tensor([p]))
            bias = m.mask(torch.ones(1, T, dtype=torch.long), 1, T, x.dtype)
            rows = []
            for i, layer in enumerate(m.layers):
                x = m.block(i, layer, x, bias, torch.arange(T)[None])
                rows.append(x[0, -1])
            rows[-1] = m.norm(x, m.norm_w)[0, -1]
            out.append([r.tolist() for r in rows])
    print(json.dumps(out))


if __name__ == "__main__":
    {"export": export, "greedy": greedy, "states": states}[sys.argv[1]](*sys.argv[2:])
