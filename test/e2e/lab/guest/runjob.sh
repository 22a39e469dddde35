# Strata e2e guest: runs one job directory (busybox sh, session leader, fd 3 = the serial port).
# argv/0..n are the arguments, one file each, taken byte for byte (never parsed by a shell);
# env/NAME adds NAME to the environment. The command is looked up in PATH here and exec'd by
# its path, so the root's own binaries run (never busybox applets) with one exec only.
# Results: stdout, stderr, then code (by rename).
d=$1
echo $$ > "$d/pid"
set --
i=0
while [ -e "$d/argv/$i" ]; do
  a=$(cat "$d/argv/$i"; echo x)
  set -- "$@" "${a%x}"
  i=$((i + 1))
done
cwd=/
if [ -e "$d/cwd" ]; then cwd=$(cat "$d/cwd"; echo x); cwd=${cwd%x}; fi
in=/dev/null
[ -e "$d/stdin" ] && in=$d/stdin
(
  exec 3>&-
  for f in "$d"/env/*; do
    [ -e "$f" ] || continue
    v=$(cat "$f"; echo x)
    export "${f##*/}=${v%x}"
  done
  cd "$cwd" || exit 126
  cmd=$1
  shift
  case "$cmd" in
    */*) ;;
    *)
      found=
      IFS=:
      for dir in $PATH; do
        [ -n "$dir" ] || dir=.
        if [ -f "$dir/$cmd" ] && [ -x "$dir/$cmd" ]; then found=$dir/$cmd; break; fi
      done
      unset IFS
      [ -n "$found" ] || { echo "$cmd: command not found" >&2; exit 127; }
      cmd=$found
      ;;
  esac
  exec "$cmd" "$@"
) < "$in" > "$d/stdout" 2> "$d/stderr"
code=$?
echo "$code" > "$d/code.tmp"
mv "$d/code.tmp" "$d/code"
echo "done ${d##*/}" >&3
