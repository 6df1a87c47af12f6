# Checks shared by the two reference trainers' test scripts (examples/cpp_trainer/test.sh,
# examples/rust_trainer/test.sh). Source it after setting:
#   trainer  an array: the trainer's command (binary and any fixed flags)
#   name     the name it prints its errors under (kary_trainer, rust_trainer)
#   out      a scratch folder
# and `. scripts/lib/plot-env.sh` before `smoke` (it draws with scripts/lib/plot_curve.py).

# bad_flags "FLAGS"...: each must exit with code 2 and a message naming the trainer.
bad_flags() {
  local bad status
  for bad in "$@"; do
    status=0
    # shellcheck disable=SC2086
    "${trainer[@]}" $bad >/dev/null 2>"$out/err.txt" || status=$?
    if [ "$status" != 2 ] || ! grep -q "$name: " "$out/err.txt"; then
      echo "$name $bad: exit $status (want 2 and a message)" >&2
      cat "$out/err.txt" >&2
      exit 1
    fi
  done
  echo "each bad flag: exit 2 with a message"
}

# smoke RUN FLAGS...: a short run that must take gradient steps, write priorities back,
# evaluate, and have its CSV drawn to a PNG.
smoke() {
  local run="$1"
  shift
  "${trainer[@]}" "$@" --csv "$out/$run.csv" --progress-seconds 0.5 >"$out/$run.log" 2>&1 || {
    cat "$out/$run.log" >&2
    echo "smoke run $run failed" >&2
    exit 1
  }
  local result grads updates rows
  result="$(grep '^RESULT ' "$out/$run.log")" || { cat "$out/$run.log" >&2; exit 1; }
  grads="$(sed -n 's/.* grad_steps=\([0-9]*\).*/\1/p' <<<"$result")"
  updates="$(sed -n 's/.* priority_updates=\([0-9]*\).*/\1/p' <<<"$result")"
  rows="$(grep -c '^eval,' "$out/$run.csv" || true)"
  if [ "${grads:-0}" -le 0 ] || [ "${updates:-0}" -le 0 ] || [ "$rows" -le 0 ]; then
    cat "$out/$run.log" >&2
    echo "smoke run $run: grad_steps=$grads priority_updates=$updates eval rows=$rows (all must be > 0)" >&2
    exit 1
  fi
  python scripts/lib/plot_curve.py "$out/$run.png" "$out/$run.csv" --title "$run" >/dev/null
  [ -s "$out/$run.png" ] || { echo "no PNG for $run" >&2; exit 1; }
  echo "$run: $grads gradient steps, $updates priorities written back, $rows evaluations, PNG drawn"
}

# resume STEPS RUN FLAGS...: a run of STEPS env steps that checkpoints every 1000 is killed
# with SIGKILL once its first checkpoint is committed; a second run with --resume must
# start from the newest committed checkpoint with its buffer (len and inserted as
# `kary-replay-ckpt inspect` reads them from the files) and end at STEPS env steps, with a
# checkpoint of its end. Needs `ckpt`, the path of the kary-replay-ckpt binary.
resume() {
  local steps="$1" run="$2"
  shift 2
  local dir="$out/$run.ckpt" pid status latest want step
  rm -rf "$dir"
  "${trainer[@]}" "$@" --steps "$steps" --checkpoint "$dir" --checkpoint-every 1000 \
    >"$out/$run.killed.log" 2>&1 &
  pid=$!
  until "$ckpt" latest "$dir" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$out/$run.killed.log" >&2
      echo "$run: the run ended before its first checkpoint" >&2
      exit 1
    fi
    sleep 0.01
  done
  kill -KILL "$pid"
  status=0
  { wait "$pid"; } 2>/dev/null || status=$?
  if [ "$status" != 137 ]; then
    echo "$run: the run was not killed (exit $status): raise its steps" >&2
    exit 1
  fi
  latest="$("$ckpt" latest "$dir")"
  "$ckpt" verify "$latest" >/dev/null
  want="$("$ckpt" inspect "$latest" |
    sed -n 's/^state: \([0-9]*\) items of [0-9]*, \([0-9]*\) inserted.*/buffer len \1, inserted \2/p')"
  step="${latest##*ckpt-}"
  step=$((10#$step))
  "${trainer[@]}" "$@" --steps "$steps" --checkpoint "$dir" --checkpoint-every 1000 --resume \
    >"$out/$run.log" 2>&1 || {
    cat "$out/$run.log" >&2
    echo "$run: the resumed run failed" >&2
    exit 1
  }
  grep -q "^resumed from $latest at env step $step: $want," "$out/$run.log" || {
    cat "$out/$run.log" >&2
    echo "$run: want 'resumed from $latest at env step $step: $want'" >&2
    exit 1
  }
  grep -q "^done: $steps env steps" "$out/$run.log" &&
    grep -q "env_steps=$steps " "$out/$run.log" || {
    cat "$out/$run.log" >&2
    echo "$run: the resumed run did not end at $steps env steps" >&2
    exit 1
  }
  "$ckpt" verify "$(printf '%s/ckpt-%012d' "$dir" "$steps")" >/dev/null || {
    echo "$run: no checkpoint of the run's end" >&2
    exit 1
  }
  echo "$run: killed after the checkpoint at $step env steps, resumed with its $want, ended at $steps"
}
