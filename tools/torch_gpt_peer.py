#!/usr/bin/python3
"""The PyTorch peer for fp8lm's training benchmark: the same GPT (token + learned position
embeddings, pre-LN blocks with a fused QKV projection, causal attention, tanh-GELU MLP, final
LayerNorm, LM head tied to the token embedding), the same AdamW and batch, on the stride task.
Prints one JSON line: tokens/s over the timed steps, seconds per step, the fastest timed step
on the CPU (as bench_train reports it: on a shared machine, the step least disturbed by
neighbours), peak RSS (and on a GPU its peak allocated memory and name).

FP32, or BF16 under torch.autocast ("PyTorch BF16 eager": no torch.compile). On the CPU it runs
with Debian's python3-torch (/usr/bin/python3); --device cuda runs on GPU 0 with PyTorch 2.x.
--attention sdpa uses F.scaled_dot_product_attention (PyTorch >= 2.0: flash attention on a GPU)
in place of the explicit softmax(QK^T)V, which materializes every head's T x T scores.
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, ffn, attention):
        super().__init__()
        self.heads = heads
        self.attention = attention
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        shape = (B, T, self.heads, C // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
            att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
            y = att @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads, ffn, attention="explicit"):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, ffn, attention) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def stride_batch(gen, B, T, vocab, max_stride=8):
    a = torch.randint(0, vocab, (B, 1), generator=gen)
    k = torch.randint(1, max_stride + 1, (B, 1), generator=gen)
    seq = (a + k * torch.arange(T + 1)) % vocab
    return seq[:, :-1], seq[:, 1:]


def main():
    p = argparse.ArgumentParser()
    for flag, default in [("vocab", 128), ("seq-len", 64), ("d-model", 256), ("n-layers", 4),
                          ("n-heads", 8), ("ffn", 1024), ("batch-size", 32), ("steps", 10),
                          ("warmup-steps", 2), ("threads", 2)]:
        p.add_argument("--" + flag, type=int, default=default)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda: PyTorch sees no CUDA device")
    if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(f"error: --attention sdpa needs PyTorch >= 2.0 (this is {torch.__version__})")
    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    model = GPT(a.vocab, a.seq_len, a.d_model, a.n_layers, a.n_heads, a.ffn, a.attention)
    model.to(a.device)
    decay = [q for n, q in model.named_parameters() if q.dim() == 2 and n != "wpe.weight"]
    rest = [q for n, q in model.named_parameters() if not (q.dim() == 2 and n != "wpe.weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(1)
    # Every batch is made (on the CPU, as before) and moved to the device before the loop, so
    # that no host-to-device copy stalls a timed step.
    batches = [tuple(t.to(a.device) for t in stride_batch(gen, a.batch_size, a.seq_len, a.vocab))
               for _ in range(a.warmup_steps + a.steps)]

    def sync():  # device work is asynchronous: wait for it before reading the clock
        if a.device == "cuda":
            torch.cuda.synchronize()

    start = None
    fastest = math.inf
    for step, (tokens, targets) in enumerate(batches):
        if step == a.warmup_steps:
            sync()
            start = time.perf_counter()
        step_start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        # On a GPU a per-step wait would stall the host's launches of the next step: not timed.
        if start is not None and a.device == "cpu":
            fastest = min(fastest, time.perf_counter() - step_start)
    sync()
    seconds = time.perf_counter() - start
    result = {
        "precision": a.precision,
        "tokens_per_s": round(a.steps * a.batch_size * a.seq_len / seconds, 1),
        "seconds_per_step": round(seconds / a.steps, 4),
        "fastest_step_seconds": round(fastest, 4) if fastest < math.inf else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "torch": torch.__version__,
        "device": "cpu",
        "attention": a.attention,
    }
    if a.device == "cuda":
        result["device"] = f"cuda:0 {torch.cuda.get_device_name(0)}"
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
