"""Tiny decoders written in plain PyTorch as transformers writes them, exported
by torch.onnx.export without a KV cache (logits only), and their float64
greedy decoding: the graphs users export by hand, and their reference.

    torch_export.py export FAMILY DIR SEED     writes DIR/model.onnx (DIR holds config.json)
    torch_export.py greedy FAMILY DIR SEED IDS MAX_NEW EOS
                                               prints the float64 greedy ids of each prompt in IDS (a JSON list)

Families: llama (RMSNorm, rotary tables sliced to the keys' length and
indexed by position_ids, grouped-query attention, the causal mask from
torch.arange over the query length plus the padding from attention_mask, as
transformers 4.36 writes Llama), gpt2 (learned absolute positions indexed by
position_ids, fused QKV, the causal mask sliced from a buffer at the keys'
length), gptj (interleaved rotary embeddings on part of each head), falcon
(one key/value head broadcast against the queries), gpt_bigcode (multi-query,
keys without a heads' axis), bloom,
opt and neox (batch and heads merged into one axis for bmm, as
transformers writes them; each class says more). The weights are drawn from
SEED, so export and reference agree.
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
    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
        self.H, self.KV = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = d // self.H
        inter = c["intermediate_size"]
        r, _, w = draws(g)
        self.embed = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
        self.layers = nn.ModuleList()
        for _ in range(L):
            m = nn.Module()
            m.ln1, m.ln2 = w(d), w(d)
            m.q, m.k, m.v, m.o = r(self.H * self.hd, d), r(self.KV * self.hd, d), r(self.KV * self.hd, d), r(d, d)
            m.gate, m.up, m.down = r(inter, d), r(inter, d), r(d, inter)
            self.layers.append(m)
        self.norm = nn.Parameter(torch.ones(d, dtype=torch.float64))
        self.head = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64) * 2 / math.sqrt(d))
        rotary_tables(self, c["rope_theta"], self.hd, c["max_position_embeddings"])
        self.eps = c["rms_norm_eps"]

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def forward(self, input_ids, attention_mask, position_ids):
        B, T = input_ids.shape
        x = self.embed[input_ids]
        dt = x.dtype
        bias = mask_bias(attention_mask, B, T, dt)
        for m in self.layers:
            h = self.rms(x, m.ln1)
            q = (h @ m.q.T).view(B, T, self.H, self.hd).transpose(1, 2)
            k = (h @ m.k.T).view(B, T, self.KV, self.hd).transpose(1, 2)
            v = (h @ m.v.T).view(B, T, self.KV, self.hd).transpose(1, 2)
            kv_len = k.shape[-2]
            cos = self.cos_cached[:kv_len].to(dt)[position_ids].unsqueeze(1)
            sin = self.sin_cached[:kv_len].to(dt)[position_ids].unsqueeze(1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = self.H // self.KV
            k = k[:, :, None].expand(B, self.KV, rep, kv_len, self.hd).reshape(B, self.H, kv_len, self.hd)
            v = v[:, :, None].expand(B, self.KV, rep, kv_len, self.hd).reshape(B, self.H, kv_len, self.hd)
            s = q @ k.transpose(2, 3) / math.sqrt(self.hd) + bias
            a = torch.softmax(s, dim=-1) @ v
            x = x + a.transpose(1, 2).reshape(B, T, -1) @ m.o.T
            h = self.rms(x, m.ln2)
            x = x + (torch.nn.functional.silu(h @ m.gate.T) * (h @ m.up.T)) @ m.down.T
        return self.rms(x, self.norm) @ self.head.T


class Gpt2(nn.Module):
    def __init__(self, c, g):
        super().__init__()
        V, d, L = c["vocab_size"], c["n_embd"], c["n_layer"]
        self.H, self.d = c["n_head"], d
        self.hd = d // self.H
        # Conv1D weights are [in, out]: scaled by their first axis.
        r = lambda *s: nn.Parameter(torch.randn(*s, generator=g, dtype=torch.float64) / math.sqrt(s[0]))
        _, b, _ = draws(g)
        self.wte = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64) * 0.5)
        self.wpe = nn.Parameter(torch.randn(c["n_positions"], d, generator=g, dtype=torch.float64) * 0.5)
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
        self.embed = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
        self.ln_e = nn.ParameterList((w(d), b(d)))
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
        self.embed = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
        self.pos = nn.Parameter(0.5 * torch.randn(c["max_position_embeddings"] + 2, d, generator=g, dtype=torch.float64))
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
        self.embed = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
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
        self.wte = nn.Parameter(torch.randn(V, d, generator=g, dtype=torch.float64))
        self.wpe = nn.Parameter(0.5 * torch.randn(c["n_positions"], d, generator=g, dtype=torch.float64))
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


FAMILIES = {"llama": Llama, "gpt2": Gpt2, "bloom": Bloom, "opt": Opt, "neox": Neox, "gptj": Gptj,
            "falcon": Falcon, "gpt_bigcode": GptBigcode}


def build(family, d, seed):
    g = torch.Generator().manual_seed(int(seed))
    return FAMILIES[family](cfg_of(d), g).eval()


def export(family, d, seed):
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
        torch.onnx.export(m, (ids, mask, pos)[: len(names)], f"{d}/model.onnx", opset_version=17,
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


if __name__ == "__main__":
    {"export": export, "greedy": greedy}[sys.argv[1]](*sys.argv[2:])
