#!/usr/bin/env bash
# fabnb in CI: main's run is the base; a pull request's run is compared with it, question by question.
#
#   compare.sh base       on main: run the experiment into $FABNB_BASE (a rerun resumes: the cache answers what
#                         did not change)
#   compare.sh candidate  on a pull request: run it into $FABNB_CANDIDATE, compare with $FABNB_BASE, write
#                         compare.md and compare.json there (compare.md is added to $GITHUB_STEP_SUMMARY when
#                         GitHub sets it), and exit as fabnb compare does: 1 only for a regression with evidence
#
# Settings (environment):
#   FABNB_EXPERIMENT    the experiment file (required)
#   FABNB_BASE          main's run folder (default fabnb-runs/main)
#   FABNB_CANDIDATE     the pull request's run folder (default fabnb-runs/candidate)
#   FABNB_CACHE_DIR     fabnb's response cache: keep it between CI runs (actions/cache), so an unchanged call
#                       costs nothing and returns the same reply
#   FABNB_COMPARE_ARGS  the flags of fabnb compare (default --fail-on-regression; add --margin 0.05,
#                       --fail-on-inconclusive, --map OLD=NEW, ...)
#   FABNB               the fabnb command (default fabnb)
set -euo pipefail
role=${1:-}
fabnb=${FABNB:-fabnb}
base=${FABNB_BASE:-fabnb-runs/main}
candidate=${FABNB_CANDIDATE:-fabnb-runs/candidate}
: "${FABNB_EXPERIMENT:?set FABNB_EXPERIMENT to the experiment file}"

case "$role" in
    base)
        $fabnb run "$FABNB_EXPERIMENT" --out "$base" --yes --no-probe --no-progress
        ;;
    candidate)
        if [ ! -f "$base/manifest.json" ]; then
            echo "compare.sh: no base run at $base (no manifest.json); run 'compare.sh base' on main first, or" \
                 "restore its folder from the cache" >&2
            exit 2
        fi
        $fabnb run "$FABNB_EXPERIMENT" --out "$candidate" --yes --no-probe --no-progress
        status=0
        # shellcheck disable=SC2086
        $fabnb compare "$base" "$candidate" ${FABNB_COMPARE_ARGS:---fail-on-regression} || status=$?
        if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$candidate/compare.md" ]; then
            cat "$candidate/compare.md" >> "$GITHUB_STEP_SUMMARY"
        fi
        exit "$status"
        ;;
    *)
        echo "usage: compare.sh base|candidate (see the comments at the top)" >&2
        exit 2
        ;;
esac
