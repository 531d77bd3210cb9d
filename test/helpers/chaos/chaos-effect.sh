#!/bin/sh
# The effect of a chaos execution: chaos-effect.sh MARKER TAG SECONDS. Appends "begin", sleeps,
# then appends "end" (the effect) to MARKER. The execution's id and round are written too when
# the agent puts them in the environment.
echo "begin $2 ${AX_EXECUTION_ID:-} ${AX_ROUND:-} $$" >> "$1"
if [ "${3:-0}" != "0" ]; then sleep "$3"; fi
echo "end $2 ${AX_EXECUTION_ID:-} ${AX_ROUND:-} $$" >> "$1"
