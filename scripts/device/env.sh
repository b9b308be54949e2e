# Sourced on the GPU machine (no package registry) before building or running
# docmatch there: unpacks the Debian packages that scripts/device/fetch-debs.py
# downloaded (carried in .device/debs) under a private prefix with dpkg -x,
# once, and points the build and the runtime at it:
#   PATH, LD_LIBRARY_PATH   the prefix's programs and libraries (Open MPI's,
#                           HDF5's serial flavour included)
#   OPAL_PREFIX             Open MPI relocated: mpirun and the wrapper
#                           compilers find their files under the prefix
#   PKG_CONFIG_*            SentencePiece's .pc with the prefix prepended
#   DOCMATCH_CMAKE_ARGS     the -D options scripts/device/build.sh passes
# Nothing is written outside the prefix.
DOCMATCH_DEBS="${DOCMATCH_DEBS:-.device/debs}"
DOCMATCH_PREFIX="${DOCMATCH_PREFIX:-/tmp/docmatch-prefix}"
_usr="$DOCMATCH_PREFIX/usr"
_lib="$_usr/lib/x86_64-linux-gnu"
# Unpacked again when the carried packages change (a warm machine keeps the prefix).
_debs=$(ls "$DOCMATCH_DEBS" 2> /dev/null | grep '\.deb$' | md5sum | cut -c1-32)
if [ "$(cat "$DOCMATCH_PREFIX/.unpacked" 2> /dev/null)" != "$_debs" ]; then
  rm -rf "$DOCMATCH_PREFIX"
  if ! ls "$DOCMATCH_DEBS"/*.deb > /dev/null 2>&1; then
    echo "[device] no .deb files in $DOCMATCH_DEBS: run scripts/device/fetch-debs.py where Debian's registry is" \
         "reachable and carry .device" >&2
    return 1
  fi
  mkdir -p "$DOCMATCH_PREFIX"
  for deb in "$DOCMATCH_DEBS"/*.deb; do dpkg -x "$deb" "$DOCMATCH_PREFIX"; done
  # Debian names these through update-alternatives, which dpkg -x does not run.
  for tool in "$_usr"/bin/*.openmpi; do ln -sf "$(basename "$tool")" "${tool%.openmpi}"; done
  ln -sf ../../../lib/x86_64-linux-gnu/openmpi/include "$_usr/include/x86_64-linux-gnu/openmpi" 2> /dev/null || true
  [ -e "$_usr/bin/pkg-config" ] || ln -sf pkgconf "$_usr/bin/pkg-config"
  # HDF5's compiler wrapper carries the install prefix; point it here.
  for wrapper in "$_usr"/bin/h5cc*; do
    [ -f "$wrapper" ] && sed -i "s#^prefix=\"/usr\"#prefix=\"$_usr\"#" "$wrapper"
  done
  echo "$_debs" > "$DOCMATCH_PREFIX/.unpacked"
fi
export PATH="$_usr/bin:$PATH"
export LD_LIBRARY_PATH="$_lib:$_lib/openmpi/lib:$_lib/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$_usr"
# PMIx's plugins from the prefix, not the machine's own (another PMIx's fail to load).
export PMIX_MCA_mca_base_component_path="$_lib/pmix2/lib/pmix"
export PMIX_MCA_pcompress_base_silence_warning=1
export PKG_CONFIG_PATH="$_lib/pkgconfig:$_usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$DOCMATCH_PREFIX"
export DOCMATCH_EXTRA_PREFIX="$_usr"  # scripts/build.sh adds it to CMAKE_PREFIX_PATH
DOCMATCH_CMAKE_ARGS=(
  "-DMPI_C_COMPILER=$_usr/bin/mpicc.openmpi"
  "-DHDF5_C_COMPILER_EXECUTABLE=$_usr/bin/h5cc"
  "-DICU_ROOT=$_usr"
  "-DCMAKE_LIBRARY_PATH=$_lib;$_lib/hdf5/serial"
  "-DCMAKE_INCLUDE_PATH=$_usr/include;$_usr/include/hdf5/serial"
)
unset _usr _lib _debs
