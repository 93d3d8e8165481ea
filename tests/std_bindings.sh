#!/bin/bash
# Fails when a binary of ours binds a symbol of namespace std to one of LibTorch's libraries
# (libtorch*, libc10*) instead of libstdc++ or itself. The PyTorch wheel's libtorch.so exports its
# own copies of some of libstdc++'s functions (std::filesystem's among them, PyTorch issue #133437)
# and a program that calls them binds to those: std::filesystem::remove_all jumped to address 0.
# The dynamic linker reports every binding itself (LD_DEBUG=bindings; LD_BIND_NOW resolves all of
# them at start), so this reads what really happens, not a guess from symbol tables.
#   std_bindings.sh BINARY...   (each is started with --help)
set -u
status=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
for binary in "$@"; do
  name=$(basename "$binary")
  LD_DEBUG=bindings LD_BIND_NOW=1 LD_DEBUG_OUTPUT="$log/$name" "$binary" --help >/dev/null 2>&1
  if ! cat "$log/$name".* >/dev/null 2>&1; then
    echo "FAILED: $binary reported no bindings (LD_DEBUG unsupported?)"
    status=1
    continue
  fi
  # "binding file BIN [0] to LIB [0]: normal symbol `SYM' [VERSION]", mangled std:: names only:
  # _ZSt..., _ZNSt..., _ZNKSt..., and the typeinfo/vtable of std:: classes (_ZTISt..., _ZTVNSt...).
  bound=$(grep -hF "binding file $binary [0] to " "$log/$name".* |
          grep -E " to [^ ]*/lib(torch|c10)[^ /]*\.so[^ ]* \[" |
          grep -E "symbol \`_Z(T[ISV])?N?K?St" | sed -E 's/.* to ([^ ]*) .*symbol `([^'"'"']*).*/\1 \2/' | sort -u)
  total=$(cat "$log/$name".* | grep -cF "binding file $binary [0]")
  if [ -n "$bound" ]; then
    echo "FAILED: $name binds std:: symbols to LibTorch's libraries:"
    while read -r lib sym; do echo "  $(echo "$sym" | c++filt)  ->  $lib"; done <<<"$bound"
    status=1
  else
    echo "ok: $name: $total bindings, none of a std:: symbol to libtorch*/libc10*"
  fi
done
exit $status
