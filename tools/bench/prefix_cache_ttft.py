#!/usr/bin/env python3
"""Time to first token with a shared system prompt, with and without automatic prefix caching (issue 15).

--chats concurrent chat clients (default 32) each hold a conversation of --turns requests through
/v1/chat/completions (streamed, temperature 0): the same system prompt of about --system-tokens tokens (default
1000), then the chat's own questions, the worker's answers carried into the next turn. Each round starts one
worker with the prefix cache and one with --no-prefix-cache, alternating which goes first (the machine may be
shared: alternating spreads its load over both), and measures every request's time to its first content token.
Prints one markdown table: TTFT p50 / p90, mean cached prompt tokens per request, requests, and the ratio of the
p50s; the load average before and after each run. Python standard library only.

  python3 tools/bench/prefix_cache_ttft.py --worker build/ci/llm-worker-rbee \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --backend cpu [--rounds 2] [--json-out F]
  # on a GPU machine: --backend cuda --model /tmp/llama2-7b-q4_0.gguf (rbee random-model: random weights, so the
  # answers are noise, but the prompts and the cache work the same way)
"""
import argparse
import json
import random
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_common import Clients, Worker, no_timeout, percentile, uptime_line  # noqa: E402

TOPICS = ["opening hours", "returns", "shipping to islands", "gift cards", "warranty claims", "bulk orders",
          "lost parcels", "student discounts", "repairs", "loyalty points", "invoices", "data protection"]
QUESTIONS = ["Can I return a jar of honey after opening it?", "How long does shipping to Sardinia take?",
             "Do you sell beeswax candles in bulk?", "My parcel never arrived, what now?",
             "Is there a discount for beekeeping clubs?", "Can I pay by invoice?", "How do I repair my smoker?",
             "Which honey is best for tea?", "Do gift cards expire?", "Where is my nearest shop?"]


def system_prompt(worker, tokens):
    """A deterministic support-policy text of about `tokens` tokens (measured with the worker's /tokenize)."""
    rng = random.Random(15)
    parts = ["You are the support assistant of Hive & Co., a shop for bee-keeping supplies. Follow the policy."]
    while True:
        topic = rng.choice(TOPICS)
        parts.append(f"Policy {len(parts)} ({topic}): answer questions about {topic} politely, quote section "
                     f"{rng.randint(1, 99)}.{rng.randint(1, 9)} of the handbook, and never promise more than "
                     f"{rng.randint(2, 30)} days.")
        text = "\n".join(parts)
        status, out = worker.request("POST", "/tokenize", {"prompt": text})
        if status != 200:
            raise RuntimeError(f"/tokenize: {status} {out}")
        if out["count"] >= tokens:
            return text, out["count"]


def run_chats(worker, system, chats, turns, max_tokens):
    results = []
    clients = Clients(worker)
    barrier = threading.Barrier(chats)

    def chat(i):
        rng = random.Random(i)
        messages = [{"role": "system", "content": system}]
        barrier.wait()
        for turn in range(turns):
            messages.append({"role": "user", "content": f"(chat {i}, turn {turn}) {rng.choice(QUESTIONS)}"})
            answer = clients.chat({"messages": messages, "max_tokens": max_tokens, "temperature": 0})
            if answer is None:
                return
            ttft, total, text, usage = answer
            messages.append({"role": "assistant", "content": text})
            cached = (usage or {}).get("prompt_tokens_details", {}).get("cached_tokens", 0)
            with clients.lock:
                results.append({"chat": i, "turn": turn, "ttft": ttft, "total": total, "cached": cached,
                                "prompt_tokens": (usage or {}).get("prompt_tokens", 0), "text": text})

    wall = clients.run(chats, chat, *[(i,) for i in range(chats)])
    return results, clients.errors, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", required=True, help="llm-worker-rbee binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--system-tokens", type=int, default=1000)
    ap.add_argument("--chats", type=int, default=32)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=32, help="the worker's --parallel")
    ap.add_argument("--ctx-size", type=int, default=0, help="the worker's --ctx-size (0: enough for every chat)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each mode, alternating")
    ap.add_argument("--extra", default="", help="more worker flags, space-separated")
    ap.add_argument("--batch-invariant", choices=["off", "on", "both"], default="off",
                    help="run the workers with --batch-invariant (on), without (off) or every run both ways (both); "
                         "answers are compared within one setting")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    invariant_modes = {"off": [False], "on": [True], "both": [False, True]}[args.batch_invariant]

    # Every chat's longest prompt plus its answer, with room to spare.
    per_chat = args.system_tokens + args.turns * (args.max_tokens + 60) + 64
    ctx = args.ctx_size or args.parallel * per_chat
    runs = []
    for rnd, inv in [(r, i) for r in range(args.rounds) for i in invariant_modes]:
        order = ["cache", "no-cache"] if rnd % 2 == 0 else ["no-cache", "cache"]
        for mode in order:
            flags = ["--parallel", str(args.parallel), "--ctx-size", str(ctx), "--queue-size", str(4 * args.chats),
                     "--default-max-tokens", str(args.max_tokens), *no_timeout(args.extra), *args.extra.split()]
            if mode == "no-cache":
                flags.append("--no-prefix-cache")
            if inv:
                flags.append("--batch-invariant")
            with Worker(args.worker, args.model, args.backend, *flags) as worker:
                system, n_system = system_prompt(worker, args.system_tokens)
                before = uptime_line()
                results, errors, wall = run_chats(worker, system, args.chats, args.turns, args.max_tokens)
                after = uptime_line()
            ttfts = [r["ttft"] for r in results]
            run = {"round": rnd, "mode": mode, "invariant": inv, "system_tokens": n_system, "requests": len(results),
                   "errors": errors, "ttft_p50": percentile(ttfts, 50), "ttft_p90": percentile(ttfts, 90),
                   "cached_mean": sum(r["cached"] for r in results) / max(1, len(results)),
                   "prompt_mean": sum(r["prompt_tokens"] for r in results) / max(1, len(results)),
                   "wall_s": wall, "uptime_before": before, "uptime_after": after, "results": results}
            runs.append(run)
            print(f"round {rnd} {mode:8s}{' batch-invariant' if inv else ''}: TTFT p50 {run['ttft_p50'] * 1e3:8.0f} ms  p90 {run['ttft_p90'] * 1e3:8.0f} ms"
                  f"  cached {run['cached_mean']:6.0f}/{run['prompt_mean']:.0f} tokens  {len(results)} requests,"
                  f" {len(errors)} errors, {wall:.0f} s  [{after}]", flush=True)

    print()
    print(f"| run | system prompt | TTFT p50 | TTFT p90 | cached / prompt tokens (mean) | requests | wall | load before -> after |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        la = lambda s: s.split("load average:")[-1].split(",")[0].strip()  # noqa: E731
        print(f"| {r['round']} {r['mode']}{' batch-invariant' if r['invariant'] else ''} | {r['system_tokens']} | {r['ttft_p50'] * 1e3:.0f} ms | "
              f"{r['ttft_p90'] * 1e3:.0f} ms | {r['cached_mean']:.0f} / {r['prompt_mean']:.0f} | {r['requests']} | "
              f"{r['wall_s']:.0f} s | {la(r['uptime_before'])} -> {la(r['uptime_after'])} |")
    # Greedy answers must not depend on the cache: compare every (chat, turn), within one batch-invariant setting.
    # A GPU without --batch-invariant may differ (its kernels change with the rows of a launch, docs/DESIGN.md):
    # with --batch-invariant both, only differences with the mode on (or on the CPU) fail the script.
    same_all = True
    for rnd, inv in [(r, i) for r in range(args.rounds) for i in invariant_modes]:
        c = next(r for r in runs if r["round"] == rnd and r["mode"] == "cache" and r["invariant"] == inv)
        n = next(r for r in runs if r["round"] == rnd and r["mode"] == "no-cache" and r["invariant"] == inv)
        key = lambda r: (r["chat"], r["turn"])  # noqa: E731
        a = {key(r): r["text"] for r in c["results"]}
        b = {key(r): r["text"] for r in n["results"]}
        same = sum(1 for k in a if k in b and a[k] == b[k])
        binding = inv or args.batch_invariant == "off" or args.backend == "cpu"
        same_all = same_all and (same == len(a) == len(b) or not binding)
        print(f"round {rnd}{' batch-invariant' if inv else ''}: TTFT p50 without / with the prefix cache = "
              f"{n['ttft_p50'] / c['ttft_p50']:.2f}x; identical answers {same}/{len(a)}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    return 0 if same_all and all(not r["errors"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
