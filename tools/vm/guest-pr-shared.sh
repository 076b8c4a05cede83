# Persistent reservations shared by the two gateways of an RBD LUN, as the guest kernel's
# initiator sees them (issue 26). Sourced by guest-multipath.sh (MPATH_BACKEND=rbd) once its
# map has both paths, before the file system is made; uses its fail and step. The guest is
# one initiator with one session to each gateway: two I_T nexuses of the one LU (the target
# port differs), each reached through its path device.
#   - each path registers its own key with sg_persist (gateway 2's port is standby: PR IN
#     and OUT pass there): both keys are listed through either path;
#   - gateway 1's nexus reserves (Write Exclusive); gateway 2's path reports that
#     reservation, and a WRITE(10) sent through it (sg_raw) ends in RESERVATION CONFLICT;
#   - gateway 2's nexus preempts gateway 1's key (its registration and reservation go):
#     gateway 1's path reports the new holder, only key 2 is left, and a WRITE through
#     gateway 1 — the owner's path — now ends in RESERVATION CONFLICT too;
#   - CLEAR through gateway 2: no key, no reservation, through either path.
# Sets PR_RESULT (a summary for the result line).
PR_RESULT=

# CMD... run up to three times while it reports a unit attention (a change made through the
# other gateway tells this nexus once: whoever asks first — this command or multipathd's
# path checker — gets it)
pr_retry() {
  local out i
  for i in 1 2 3; do
    out=$("$@" 2>&1) && { echo "$out"; return 0; }
    case "$out" in *[Uu]nit[\ _][Aa]ttention*) continue ;; esac
    echo "$out"
    return 1
  done
  echo "$out"
  return 1
}

# the keys sg_persist lists through DEV, "0x..." space-separated ("none" when none)
pr_keys() { # DEV
  local out
  out=$(pr_retry timeout 30 sg_persist --in --read-keys "/dev/$1") || fail "pr: sg_persist -k /dev/$1: $out"
  echo "$out" | awk '/^ *0x/ { printf "%s%s", s, $1; s = " " } END { if (!s) printf "none" }'
}

# "KEY TYPE" of the reservation sg_persist reads through DEV ("none" when there is none)
pr_reservation() { # DEV
  local out
  out=$(pr_retry timeout 30 sg_persist --in --read-reservation "/dev/$1") || fail "pr: sg_persist -r /dev/$1: $out"
  echo "$out" | awk '/Key=/ { sub(/.*Key=/, ""); k = $1 } /type:/ { sub(/.*type: */, ""); t = $0 }
    END { if (k) printf "%s %s", k, t; else printf "none" }'
}

pr_out() { # WHY DEV SG_PERSIST_ARGS...
  local why=$1 dev=$2 out
  shift 2
  out=$(pr_retry timeout 30 sg_persist --out "$@" "/dev/$dev") || fail "pr: $why through /dev/$dev: $out"
}

# the SCSI status sg_raw reports for a one-block WRITE(10) at LBA 0 through DEV
pr_write_status() { # DEV
  local i out
  for i in 1 2 3; do
    out=$(timeout 30 sg_raw -s 512 -i /dev/zero "/dev/$1" 2a 00 00 00 00 00 00 00 01 00 2>&1)
    case "$out" in *[Uu]nit[\ _][Aa]ttention*) continue ;; esac
    break
  done
  echo "$out" | awk '/SCSI Status:/ { sub(/.*SCSI Status: */, ""); print; exit }'
}

pr_shared_check() { # DEV1 DEV2 (gateway 1's and gateway 2's path)
  local d1=$1 d2=$2 k r s
  pr_out "REGISTER key 0x1111" "$d1" --register --param-sark=0x1111
  pr_out "REGISTER key 0x2222" "$d2" --register --param-sark=0x2222
  for d in "$d1" "$d2"; do
    k=$(pr_keys "$d")
    [ "$k" = "0x1111 0x2222" ] || fail "pr: keys through /dev/$d: '$k', want both gateways' registrations"
  done
  step "pr: each path registered its key; both listed through either gateway"
  pr_out "RESERVE (Write Exclusive)" "$d1" --reserve --param-rk=0x1111 --prout-type=1
  r=$(pr_reservation "$d2")
  case "$r" in "0x1111 Write Exclusive"*) ;; *) fail "pr: gateway 2 reports reservation '$r', want 0x1111 Write Exclusive" ;; esac
  s=$(pr_write_status "$d2")
  case "$s" in *[Cc]onflict*) ;; *) fail "pr: WRITE through gateway 2 under gateway 1's reservation: status '$s'" ;; esac
  step "pr: gateway 1's reservation reported by gateway 2 ($r); a WRITE through gateway 2: $s"
  pr_out "PREEMPT key 0x1111" "$d2" --preempt --param-rk=0x2222 --param-sark=0x1111 --prout-type=1
  r=$(pr_reservation "$d1")
  case "$r" in "0x2222 Write Exclusive"*) ;; *) fail "pr: gateway 1 reports reservation '$r' after the preempt, want 0x2222" ;; esac
  k=$(pr_keys "$d1")
  [ "$k" = "0x2222" ] || fail "pr: keys through gateway 1 after the preempt: '$k'"
  s=$(pr_write_status "$d1")
  case "$s" in *[Cc]onflict*) ;; *) fail "pr: WRITE through gateway 1 (preempted) : status '$s'" ;; esac
  step "pr: gateway 2 preempted gateway 1's key: gateway 1 reports holder $r, keys $k; a WRITE through gateway 1: $s"
  pr_out "CLEAR" "$d2" --clear --param-rk=0x2222
  k=$(pr_keys "$d1")
  r=$(pr_reservation "$d1")
  [ "$k $r" = "none none" ] || fail "pr: after CLEAR gateway 1 reports keys '$k', reservation '$r'"
  step "pr: CLEAR through gateway 2: no key and no reservation through gateway 1"
  PR_RESULT="pr_shared=register,reserve,conflict,preempt,clear"
}
