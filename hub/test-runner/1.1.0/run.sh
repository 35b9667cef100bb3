#!/usr/bin/env bash
# test-runner: run the repository's own test command (AGENTOS_TEST_COMMAND, from its
# settings or detected: `agentos repo show`) and report what fails. It changes no file;
# the gate runs the suite again and decides.
set -u
command=${AGENTOS_TEST_COMMAND:-python3 -m pytest -q}
echo "test-runner: running \`$command\` in $(pwd)"
bash -c "$command"
status=$?
if [ "$status" = 0 ]; then
  echo "test-runner: all tests pass"
else
  echo "test-runner: the test command exited $status; the failures are above"
fi
exit $status
