#!/usr/bin/env python3
"""Speculative decoding's real speed-up on a copy-heavy task (issue 15): editing a given text.

Each request asks the model to rewrite a text of a few hundred tokens with one small change (greedy, so the
answer is mostly a copy of the prompt: what prompt lookup drafts from). Each round starts one worker per mode,
alternating their order (the machine may be shared), and sends the same --requests edits --concurrency at a time:
  off            plain decoding
  prompt-lookup  --spec prompt-lookup --spec-tokens K (for each K of --tokens)
  draft          --draft MODEL --spec-tokens K (with --draft)
Reported per mode: decode tokens/s per stream (completion tokens after the first / time after the first token),
end-to-end seconds per request, the acceptance ratio (accepted / drafted draft tokens, from usage
completion_tokens_details), and whether every answer equals the plain one token for token (greedy must). The
speed-up is the ratio of decode tokens/s to the plain run of the same round. Python standard library only.

  python3 tools/bench/spec_decode.py --worker build/ci/llm-worker-rbee \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --backend cpu [--tokens 2,4,8] [--rounds 2] [--json-out F]
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_common import Clients, Worker, no_timeout, percentile, uptime_line  # noqa: E402

TEXTS = [
    ("honey", "nectar",
     "Honey bees live in colonies of up to sixty thousand workers, a few hundred drones and one queen. The workers "
     "collect nectar and pollen from flowers within a few kilometres of the hive. Back in the hive, they pass the "
     "nectar from mouth to mouth and fan it with their wings until most of the water has evaporated; the result is "
     "honey, which they store in wax cells and seal with a thin cap of wax. A strong colony can store more than "
     "twenty kilograms of honey in a good summer. The beekeeper takes only the surplus and leaves enough honey for "
     "the colony to survive the winter. In spring, the queen lays up to two thousand eggs a day, and the colony "
     "grows quickly until it swarms: the old queen leaves with half of the workers to found a new colony."),
    ("def ", "async def ",
     "def load_config(path):\n    with open(path) as f:\n        return json.load(f)\n\n"
     "def save_config(path, config):\n    with open(path, 'w') as f:\n        json.dump(config, f, indent=2)\n\n"
     "def merge_configs(base, override):\n    merged = dict(base)\n    for key, value in override.items():\n"
     "        if isinstance(value, dict) and isinstance(merged.get(key), dict):\n"
     "            merged[key] = merge_configs(merged[key], value)\n        else:\n            merged[key] = value\n"
     "    return merged\n\ndef config_path(name):\n    return os.path.join(CONFIG_DIR, name + '.json')\n"),
    ("Monday", "Tuesday",
     "Meeting notes, Monday. Present: Anna, Ben, Carla, David. Anna opened the meeting and reviewed the actions of "
     "last Monday. Ben reported that the new hives arrived on Monday morning and were installed in the north "
     "field. Carla asked whether the inspection schedule could move from Monday to the weekend; David agreed to "
     "check with the volunteers. The group decided to order more frames before next Monday. Anna will send the "
     "invoice on Monday. The next meeting is on Monday at nine."),
]


def edit_request(i, max_tokens):
    old, new, text = TEXTS[i % len(TEXTS)]
    prompt = (f"Rewrite the following text, replacing every \"{old.strip()}\" with \"{new.strip()}\". Change "
              f"nothing else and output only the rewritten text.\n\n{text}")
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}


def run_mode(worker, requests, concurrency, max_tokens):
    results = [None] * requests
    clients = Clients(worker)
    next_i = [0]

    def client():
        while True:
            with clients.lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= requests:
                return
            answer = clients.chat(edit_request(i, max_tokens))
            if answer is None:
                continue
            ttft, total, text, usage = answer
            details = (usage or {}).get("completion_tokens_details", {})
            results[i] = {"ttft": ttft, "total": total, "text": text,
                          "tokens": (usage or {}).get("completion_tokens", 0),
                          "accepted": details.get("accepted_prediction_tokens", 0),
                          "rejected": details.get("rejected_prediction_tokens", 0)}

    wall = clients.run(concurrency, client)
    return results, clients.errors, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", required=True, help="llm-worker-rbee binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--draft", help="a draft model (same tokenizer) to measure too")
    ap.add_argument("--tokens", default="4", help="--spec-tokens values, comma-separated")
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--extra", default="", help="more worker flags, space-separated")
    ap.add_argument("--batch-invariant", choices=["off", "on", "both"], default="off",
                    help="run the workers with --batch-invariant (on), without (off) or every mode both ways (both); "
                         "texts are compared with plain decoding of the same setting")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    invariant_modes = {"off": [False], "on": [True], "both": [False, True]}[args.batch_invariant]

    modes = [("off", [])]
    for k in [int(x) for x in args.tokens.split(",")]:
        modes.append((f"prompt-lookup k={k}", ["--spec", "prompt-lookup", "--spec-tokens", str(k)]))
        if args.draft:
            modes.append((f"draft k={k}", ["--draft", args.draft, "--spec-tokens", str(k)]))
    runs = []
    for rnd, inv in [(r, i) for r in range(args.rounds) for i in invariant_modes]:
        order = modes if rnd % 2 == 0 else list(reversed(modes))
        for name, flags in order:
            with Worker(args.worker, args.model, args.backend, "--parallel", str(max(4, args.concurrency)),
                        "--ctx-size", str(max(4, args.concurrency) * 1024), *no_timeout(args.extra), *flags,
                        *(["--batch-invariant"] if inv else []), *args.extra.split()) as worker:
                worker.stream_chat(edit_request(0, 8))  # warm-up (first-touch of the weights, allocator)
                before = uptime_line()
                results, errors, wall = run_mode(worker, args.requests, args.concurrency, args.max_tokens)
                after = uptime_line()
            ok = [r for r in results if r]
            decode_tps = [(r["tokens"] - 1) / (r["total"] - r["ttft"]) for r in ok if r["tokens"] > 1 and r["total"] > r["ttft"]]
            drafted = sum(r["accepted"] + r["rejected"] for r in ok)
            run = {"round": rnd, "mode": name, "invariant": inv, "errors": errors, "wall_s": wall, "uptime_before": before,
                   "uptime_after": after, "results": results,
                   "decode_tps_p50": percentile(decode_tps, 50),
                   "e2e_p50": percentile([r["total"] for r in ok], 50),
                   "tokens_mean": sum(r["tokens"] for r in ok) / max(1, len(ok)),
                   "acceptance": (sum(r["accepted"] for r in ok) / drafted) if drafted else None}
            runs.append(run)
            acc = f"{run['acceptance']:.2f}" if run["acceptance"] is not None else "-"
            print(f"round {rnd} {name:20s}{' batch-invariant' if inv else ''}: decode {run['decode_tps_p50']:7.1f} tok/s/stream  e2e p50 "
                  f"{run['e2e_p50']:6.2f} s  {run['tokens_mean']:.0f} tokens  acceptance {acc}  "
                  f"{len(errors)} errors  [{after}]", flush=True)

    print()
    print("| round | mode | decode tok/s per stream (p50) | speed-up vs off | e2e s (p50) | tokens out (mean) | "
          "acceptance | same text as off | load before -> after |")
    print("|---|---|---|---|---|---|---|---|---|")
    # Speculative greedy text must equal plain decoding's (same round, same batch-invariant setting). A GPU without
    # --batch-invariant may differ (verify rows take other kernels than decode rows, docs/DESIGN.md): with
    # --batch-invariant both, only differences with the mode on (or on the CPU) fail the script.
    same_all = True
    for r in runs:
        base = next(b for b in runs if b["round"] == r["round"] and b["mode"] == "off" and b["invariant"] == r["invariant"])
        same = all(a and b and a["text"] == b["text"] for a, b in zip(r["results"], base["results"]))
        binding = r["invariant"] or args.batch_invariant == "off" or args.backend == "cpu"
        same_all = same_all and (same or not binding)
        la = lambda s: s.split("load average:")[-1].split(",")[0].strip()  # noqa: E731
        acc = f"{r['acceptance']:.2f}" if r["acceptance"] is not None else "-"
        mode = r["mode"] + (" batch-invariant" if r["invariant"] else "")
        base_tps = base["decode_tps_p50"]
        print(f"| {r['round']} | {mode} | {r['decode_tps_p50']:.1f} | "
              f"{r['decode_tps_p50'] / base_tps:.2f}x | {r['e2e_p50']:.2f} | {r['tokens_mean']:.0f} | "
              f"{acc} | {'yes' if same else 'NO'} | {la(r['uptime_before'])} -> {la(r['uptime_after'])} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    return 0 if same_all and all(not r["errors"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
