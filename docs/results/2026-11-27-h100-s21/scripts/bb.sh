# Session 21: the bundle's emm of 67ba1b5 and of main's head, interleaved on one lent host:
# `emm bench --backend cuda --resource pool-vmm --passes 5`, ROUNDS rounds.
set -u
R=$OUT
uptime > $R/host.txt 2>&1; grep "model name" /proc/cpuinfo | head -1 >> $R/host.txt
for i in $(seq 1 "$ROUNDS"); do
  for v in 67ba head; do
    hw/bb/emm_$v bench --backend cuda --resource pool-vmm --passes 5 2>&1 | awk -v i=$i -v v=$v '$1=="pool-vmm" {print i, v, $2, $4}'
  done
done > $R/bb.txt
python3 - $R/bb.txt <<'PY'
import sys, statistics as st
d = {}
for l in open(sys.argv[1]):
    i, v, w, ns = l.split(); d[(int(i), v, w)] = float(ns)
for w in ('W1', 'W2', 'W3'):
    r = [d[(i, 'head', w)] / d[(i, '67ba', w)] for i in sorted({k[0] for k in d}) if (i, 'head', w) in d and (i, '67ba', w) in d]
    o = sorted(v for (i, b, ww), v in d.items() if b == '67ba' and ww == w)
    h = sorted(v for (i, b, ww), v in d.items() if b == 'head' and ww == w)
    print(w, 'head/67ba median %.3f over %d rounds; 67ba median %.1f min %.1f; head median %.1f min %.1f' % (st.median(r), len(r), st.median(o), o[0], st.median(h), h[0]))
PY
