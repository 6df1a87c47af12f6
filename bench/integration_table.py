"""The integration table from RESULT lines (bench/integration.sh): per configuration, the
median over seeds of gradient steps per second and of wall time to the first greedy
evaluation >= 475, with each seed's values, and the ratio of each pair."""

import re
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for path in sys.argv[1:]:
    with open(path) as lines:
        results = [line for line in lines if line.startswith("RESULT ")]
    for line in results:
        f = dict(re.findall(r"(\w+)=(\S+)", line))
        name = f["trainer"] + ("-" + f["algo"] if f["trainer"] == "sb3" else "")
        runs[name].append(f)

labels = {
    "torchrl-torchrl": "TorchRL DQN, TorchRL's PrioritizedSampler",
    "torchrl-kary": "TorchRL DQN, KarySampler (kary-replay)",
    "torchrl-uniform": "TorchRL DQN, uniform RandomSampler (the bound: no sampler work)",
    "sb3-dqn": "SB3 DQN, uniform ReplayBuffer",
    "sb3-perdqn": "SB3 settings, PERDQN on kary-replay (prioritized)",
}
print("| configuration | seeds | gradient steps/s (median; per seed) | solved | time to >= 475, s (median; per seed) |")
print("|---|---|---|---|---|")
med = {}
for key, label in labels.items():
    rs = runs.get(key, [])
    if not rs:
        continue
    gps = [float(r["grad_steps_per_s"]) for r in rs]
    solved = [float(r["solved_s"]) for r in rs if r["solved"] == "1"]
    med[key] = (statistics.median(gps), statistics.median(solved) if solved else None)
    print(
        f"| {label} | {len(rs)} | {med[key][0]:.0f} ({', '.join(f'{g:.0f}' for g in gps)}) | "
        f"{len(solved)} of {len(rs)} | "
        f"{'-' if not solved else f'{med[key][1]:.1f}'} ({', '.join(r['solved_s'] if r['solved'] == '1' else 'not solved' for r in rs)}) |"
    )
for a, b in (("torchrl-kary", "torchrl-torchrl"), ("torchrl-uniform", "torchrl-torchrl"), ("sb3-perdqn", "sb3-dqn")):
    if a in med and b in med:
        print(f"\n{labels[a]} / {labels[b]}: gradient steps/s {med[a][0] / med[b][0]:.2f}x", end="")
        if med[a][1] and med[b][1]:
            print(f", time to 475 {med[a][1]:.1f} s vs {med[b][1]:.1f} s", end="")
print()
