"""@rules_cc//cc:defs.bzl as Bazel 4.2.3's @bazel_tools loads it, offline.

This project builds no C++. But every Python target's toolchain resolution
loads @bazel_tools//tools/cpp (and tools/jdk), whose BUILD files load
cc_binary, cc_library, cc_toolchain and cc_toolchain_suite from @rules_cc.
Bazel 4.2.3 would download rules_cc (commit b1c40e1de819, an http_archive in
its DEFAULT.WORKSPACE.SUFFIX); offline that fails with "Unknown host". Debian's
bazel-rules-cc (0.0.4) cannot stand in: its defs.bzl loads `use_cpp_toolchain`
from @bazel_tools//tools/cpp:toolchain_utils.bzl, which Bazel 4.2.3 does not
have ("does not contain symbol 'use_cpp_toolchain'").

At b1c40e1 these macros are exactly this: the native rule, with the migration
tag added. WORKSPACE maps @rules_cc to this folder.
"""

_MIGRATION_TAG = "__CC_RULES_MIGRATION_DO_NOT_USE_WILL_BREAK__"

def _add_tags(attrs):
    if "tags" in attrs and attrs["tags"] != None:
        attrs["tags"] = attrs["tags"] + [_MIGRATION_TAG]
    else:
        attrs["tags"] = [_MIGRATION_TAG]
    return attrs

def cc_binary(**attrs):
    native.cc_binary(**_add_tags(attrs))

def cc_test(**attrs):
    native.cc_test(**_add_tags(attrs))

def cc_library(**attrs):
    native.cc_library(**_add_tags(attrs))

def cc_import(**attrs):
    native.cc_import(**_add_tags(attrs))

def cc_toolchain(**attrs):
    native.cc_toolchain(**_add_tags(attrs))

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**_add_tags(attrs))
