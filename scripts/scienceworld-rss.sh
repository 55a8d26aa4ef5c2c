#!/bin/bash
# Peak RSS of a tiny-model ScienceWorld-like training run on the fake gateway
# (environments/scienceworld's test binary plays `java`; no jar needed):
# README "Speed and memory" and docs/environments.md. CTX=2048 sets the context.
set -e
BIN=${BIN:-bin/empo2}; D=${D:-build/scienceworld-rss}; CTX=${CTX:-}
mkdir -p $D
[[ -x $D/fake-java ]] || go test -c -o $D/fake-java ./environments/scienceworld
echo "not really a jar" > $D/scienceworld.jar
[[ -f $D/tiny4k.gguf ]] || $BIN model init --ctx 4096 --out $D/tiny4k.gguf >/dev/null 2>&1
rm -rf $D/run
extra=(); [[ -n "$CTX" ]] && extra=(--set context=$CTX)
FAKE_SCIENCEWORLD_JVM=gateway /usr/bin/time -f "time_maxrss_kb %M wall %e" $BIN train --preset scienceworld --model $D/tiny4k.gguf --run-dir $D/run --steps 2 \
  --scienceworld-jar $D/scienceworld.jar --set "env_options.extra={java: $PWD/$D/fake-java}" \
  --set batch.tasks=2 --set batch.rollouts=4 --set 'tasks=[power-component]' "${extra[@]}" 2>&1 | grep -v '"level"' | tail -4
python3 -c "
import json
for l in open('$D/run/metrics.jsonl'):
    m=json.loads(l); print('step',m.get('step'),'max_rss_MiB',round(m.get('max_rss_bytes',0)/2**20,1),'update_compute_MiB',round(m.get('update_compute_bytes',m.get('compute_peak_bytes',0))/2**20,1),'context',m.get('context'),'ends',m.get('end_reasons'),'updates',m.get('updates'))
"
