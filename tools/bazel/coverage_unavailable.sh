#!/bin/sh
# .bazelrc's --coverage_report_generator (see tools/bazel/BUILD).
echo "bazel coverage is not available offline: Bazel 4.2.3's coverage report" \
     "generator is @remote_coverage_tools (coverage_output_generator-v2.5.zip)," \
     "which Bazel downloads." >&2
exit 1
