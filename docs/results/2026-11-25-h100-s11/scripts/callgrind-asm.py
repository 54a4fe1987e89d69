# Joins callgrind --dump-instr=yes (positions: instr line) self costs with objdump, one function.
import sys, re, subprocess, collections
out, binary, fn_pat = sys.argv[1], sys.argv[2], sys.argv[3]
div = float(sys.argv[4]) if len(sys.argv) > 4 else 1
costs = collections.Counter(); names = {}
in_fn = False; last = 0; skip = False
def pos(tok, prev):
    if tok == '*': return prev
    if tok.startswith('+'): return prev + int(tok[1:], 0)
    if tok.startswith('-'): return prev - int(tok[1:], 0)
    return int(tok, 0)
for line in open(out):
    line = line.rstrip('\n')
    m = re.match(r'^(c?fn)=\((\d+)\)(?: (.*))?$', line)
    if m:
        if m.group(3): names[m.group(2)] = m.group(3)
        if m.group(1) == 'fn':
            in_fn = re.search(fn_pat, names.get(m.group(2), '')) is not None
        continue
    if line.startswith('calls='): skip = True; continue
    if not line or not (line[0] in '0123456789+-*'): continue
    parts = line.split()
    a = pos(parts[0], last); last = a
    if skip: skip = False; continue
    if in_fn and len(parts) >= 3: costs[a] += int(parts[2])
lo, hi = min(costs), max(costs)
dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', '-C', f'--start-address={lo:#x}', f'--stop-address={hi+16:#x}', binary], capture_output=True, text=True).stdout
tot = 0
for l in dis.splitlines():
    m = re.match(r'^\s*([0-9a-f]+):\s*(.*)$', l)
    if not m: continue
    a = int(m.group(1), 16); c = costs.get(a, 0); tot += c
    print(f"{c/div:7.2f} {a:x}: {m.group(2)}")
print(f"total {tot/div:.1f}", file=sys.stderr)
