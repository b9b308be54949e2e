#!/usr/bin/env python3
"""Downloads, on a machine with Debian 12's package registry, the .deb files
that docmatch's GPU build needs on a machine without one (the lent GPU
machine): Open MPI, HDF5, glog, GoogleTest, yaml-cpp, CLI11, nlohmann-json, hnswlib,
ICU and SentencePiece, with their library dependencies, into --output
(default .device/debs, which git ignores and `device` carries).

The dependency closure stops at what any CUDA/PyTorch image already has or
what the build does not need: the C library and compilers, Perl and Python,
Fortran, LLVM. scripts/device/build.sh unpacks the files under a private
prefix there (dpkg -x, nothing touches /).

With --runtime, only what a build made elsewhere needs to run (the shared
libraries, mpirun and GNU time, no headers): what scripts/device/pack-build.sh's
carried build needs, a fifth of the size.

usage: scripts/device/fetch-debs.py [--output DIR] [--runtime]
"""
import argparse
import os
import re
import subprocess
import sys

ROOTS = ["libopenmpi-dev", "openmpi-bin", "libhdf5-dev", "libgoogle-glog-dev", "libgtest-dev", "libgmock-dev",
         "libyaml-cpp-dev", "libcli11-dev", "nlohmann-json3-dev", "libhnswlib-dev", "libicu-dev", "libsentencepiece-dev",
         "pkgconf",
         "ccache",
         "time"]  # GNU time: bench/train_step.sh reads each run's peak RSS with it
# Present on the image or not needed to build and run docmatch.
# The GPU machine's image (Ubuntu, 2026-11) lacks LDAP's and libunistring's
# libraries, which HDF5's libcurl needs: named here, past SKIP. h5ls (hdf5-tools)
# is what a shard-format test reads the shards with.
RUNTIME_ROOTS = ["openmpi-bin", "libopenmpi3", "libhdf5-103-1", "libgoogle-glog0v6", "libyaml-cpp0.7", "libicu72",
                 "libsentencepiece0", "time", "hdf5-tools", "libldap-2.5-0", "libunistring2", "libsasl2-2"]
SKIP = re.compile(r"^(libc6|libc-dev-bin|libc6-dev|libcrypt|linux-libc-dev|libgcc|libstdc\+\+|gcc|g\+\+|cpp|gfortran|"
                  r"libgfortran-\d+-dev|flang|libflang|llvm|libllvm|clang|libclang|libmlir|binutils|libbinutils|"
                  r"libctf|libgprofng|libsframe|libasan|libtsan|liblsan|libubsan|libhwasan|libitm|libquadmath|"
                  r"libatomic|libgomp|libcc1|libisl|libmpc|libmpfr|libgmp|libz3|libjansson|perl|libperl|python|"
                  r"libpython|debconf|dpkg|tar|coreutils|sensible-utils|tzdata|ca-certificates|openssl$|"
                  r"zlib1g$|libzstd1|liblzma5|libbz2|libselinux|libpcre|libtinfo|libncurses|libreadline|readline|"
                  r"libedit|libffi|libmd0|libbsd0|libjs-|icu-devtools|make|autoconf|automake|libtool|m4|"
                  r"openssh|rsh-|libobjc|libgnutls|libnettle|libhogweed|libp11|libtasn1|libidn|libunistring|"
                  r"libkrb5|libk5crypto|libgssapi|libcom-err|libkeyutils|libsasl|libldap|libsystemd|libudev|"
                  r"libcap2|libgcrypt|libgpg-error|liblz4|libaudit|libsemanage|libsepol|libdb5|libexpat|"
                  r"libuuid|libblkid|libmount|libsmartcols|libsqlite|adduser|passwd|libpam)")


def depends(package):
    """The first alternative of each Depends/PreDepends group of `package`."""
    out = subprocess.run(["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts",
                          "--no-breaks", "--no-replaces", "--no-enhances", package],
                         capture_output=True, text=True).stdout
    result, taking = [], True
    for line in out.splitlines()[1:]:
        m = re.match(r"\s+(\|?)(Pre)?Depends: (\S+)", line)
        if not m:
            continue
        alternative, name = m.group(1) == "|", m.group(3)
        if taking and not name.startswith("<"):
            result.append(name)
        taking = not alternative  # after "a | b", skip b
    return result


def virtual_provider(name):
    """A real package for a virtual one (<name>), e.g. libgfortran5 for a Fortran runtime."""
    out = subprocess.run(["apt-cache", "showpkg", name.strip("<>")], capture_output=True, text=True).stdout
    if "Reverse Provides:" in out:
        lines = out.split("Reverse Provides:")[1].strip().splitlines()
        if lines and lines[0].strip():
            return lines[0].split()[0]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=".device/debs")
    parser.add_argument("--runtime", action="store_true", help="run-time libraries and programs only")
    args = parser.parse_args()
    seen, queue = set(), list(RUNTIME_ROOTS if args.runtime else ROOTS)
    while queue:
        name = queue.pop()
        if name.startswith("<"):
            name = virtual_provider(name) or ""
        skipped = SKIP.match(name) and not (args.runtime and name in RUNTIME_ROOTS)
        if not name or name in seen or skipped or (args.runtime and name.endswith("-dev")):
            continue
        seen.add(name)
        queue.extend(depends(name))
    os.makedirs(args.output, exist_ok=True)
    for old in os.listdir(args.output):
        if old.endswith(".deb"):
            os.remove(os.path.join(args.output, old))
    packages = sorted(seen)
    subprocess.run(["apt-get", "download", "-q"] + packages, cwd=args.output, check=True,
                   stdout=subprocess.DEVNULL)
    size = sum(os.path.getsize(os.path.join(args.output, f)) for f in os.listdir(args.output))
    with open(os.path.join(args.output, "packages.txt"), "w") as f:
        f.write("\n".join(packages) + "\n")
    print(f"[fetch-debs] {len(packages)} packages, {size / 1e6:.1f} MB in {args.output}")


if __name__ == "__main__":
    main()
