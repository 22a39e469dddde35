# Strata e2e guest: the job loop (inside the chroot, busybox sh; PID 1 restarts it if it exits).
# The host drops a job directory in the share (jobs/<id>/argv/0..n, env/NAME, cwd, stdin) by
# rename, then writes a line on the virtio-serial port "strata.lab". Each line wakes this loop,
# which starts every new job (runjob.sh, own session) and kills the ones marked `cancel`.
# A line "poweroff" ends the guest; so does the host closing its end (its process died).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
B=/run/strata/bin
JOBS=/run/strata/share/jobs
say() { echo "strata-loop [$(cut -d' ' -f1 /proc/uptime)] $*" > /dev/console; }

port=
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = strata.lab ] && port=/dev/${p##*/}
done
[ -n "$port" ] || { say "no strata.lab port"; echo c > /proc/sysrq-trigger; }

# No special builtins with redirections below: their failure (a job directory the host has
# just removed) would end the shell.
scan() {
  for d in "$JOBS"/*; do
    [ -d "$d" ] || continue
    if [ -e "$d/cancel" ]; then
      if [ -e "$d/cancelled" ]; then
        continue
      elif [ -e "$d/pid" ]; then
        pid=$(cat "$d/pid" 2>/dev/null)
        [ -n "$pid" ] && kill -KILL "-$pid" 2>/dev/null
        say "cancelled job ${d##*/} (process group $pid)"
        touch "$d/cancelled" 2>/dev/null
        echo "cancelled ${d##*/}" >&3
      elif mkdir "$d/started" 2>/dev/null; then
        touch "$d/cancelled" 2>/dev/null
        echo "cancelled ${d##*/}" >&3
      fi
      continue
    fi
    mkdir "$d/started" 2>/dev/null || continue
    setsid "$B/busybox" sh "$B/runjob.sh" "$d" &
  done
}

exec 3<>"$port"
say "ready on $port"
mkdir -p "$JOBS"
scan
eof=0
while :; do
  if read -r line <&3; then
    eof=0
    case "$line" in
      poweroff) break ;;
    esac
    scan
  else
    # EOF: the host end is closed. Give a reconnect 5 s, then power off.
    eof=$((eof + 1))
    [ "$eof" -ge 10 ] && { say "host disconnected"; break; }
    sleep 0.5
    scan
  fi
done
say "power off"
sync
reboot -f
