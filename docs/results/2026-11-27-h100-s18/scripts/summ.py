import os,statistics as st,sys
rows=[l.split() for l in open(sys.argv[1])]
V=sys.argv[2].split()
for k,name in ((3,'median pass'),(4,'min pass')):
  print('==',name,': processes under 40 ns (count, median) and at or over (count, median); fastest')
  for v in V:
    out=[]
    for w in ('w1','w2','w3'):
      xs=sorted(float(r[k]) for r in rows if r[1]==v and r[2]==w)
      f=[x for x in xs if x<40]; s=[x for x in xs if x>=40]
      out.append('%s %2d %.2f | %2d %.2f | %.2f'%(w,len(f),st.median(f) if f else 0,len(s),st.median(s) if s else 0,xs[0]))
    print(v,' || '.join(out))
