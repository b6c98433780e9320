#!/usr/bin/env python3
"""Shared check cache figures, until mixer-bench has a `shared` scenario.

Three `mixer serve` replicas on one listchecker config (1000 users allowed of 2000), forward-auth
checks sent round robin over them, users drawn from a Zipf distribution (s = 1.1) over 10000
keys: adapter calls, hit ratio per tier and request latency, first with per-replica caches,
then with `--shared-cache` on one local redis-server. Sequential requests (one at a time).

    python3 mixer/bench/shared_cache.py [REQUESTS] [MIXER_BINARY]
"""
import bisect, http.client, os, random, socket, subprocess, sys, tempfile, time
CONFIG=os.path.join(tempfile.mkdtemp(), "config.yaml")
BIN=sys.argv[2] if len(sys.argv) > 2 else "target/debug/mixer-under-test"
def port():
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); return p
cfg=open(CONFIG, "w")
users=[f"u{i}" for i in range(0,2000,2)]
cfg.write(f'''
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: users, namespace: istio-system}}
spec:
  compiledAdapter: listchecker
  params: {{overrides: {users}, blacklist: false, cachingInterval: 60s}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: user, namespace: istio-system}}
spec:
  compiledTemplate: listentry
  params: {{value: 'request.headers["x-user"] | "nobody"'}}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: users, namespace: istio-system}}
spec:
  actions: [{{handler: users.handler, instances: [user.instance]}}]
'''.replace("'u","\"u").replace("',","\",").replace("']","\"]"))
cfg.close()
rp=port()
redis=subprocess.Popen(["redis-server","--port",str(rp),"--save","","--appendonly","no"],stdout=subprocess.DEVNULL)
time.sleep(0.5)
def fleet(extra):
    ms=[]
    for _ in range(3):
        g,h,a=port(),port(),port()
        p=subprocess.Popen([BIN,"serve","--config",CONFIG,"--grpc-addr",f"127.0.0.1:{g}","--http-addr",f"127.0.0.1:{h}","--admin-addr",f"127.0.0.1:{a}","--worker-threads","1"]+extra,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
        ms.append((p,h,a))
    for p,h,a in ms:
        for _ in range(200):
            try:
                c=http.client.HTTPConnection("127.0.0.1",a,timeout=2); c.request("GET","/readyz")
                if c.getresponse().status==200: break
            except Exception: pass
            time.sleep(0.05)
    return ms
def metric(a,name,part=""):
    c=http.client.HTTPConnection("127.0.0.1",a); c.request("GET","/metrics"); body=c.getresponse().read().decode()
    return sum(float(l.rsplit(" ",1)[1]) for l in body.splitlines() if l.startswith(name) and part in l)
# Zipf(s=1.1) over 10000 keys
N=10000; w=[1/(k**1.1) for k in range(1,N+1)]; cum=[];t=0
for x in w: t+=x; cum.append(t)
random.seed(7)
seq=[bisect.bisect(cum,random.random()*t) for _ in range(int(sys.argv[1]) if len(sys.argv)>1 else 6000)]
def drive(ms):
    conns=[http.client.HTTPConnection("127.0.0.1",h) for _,h,_ in ms]
    lat=[]; start=time.time()
    for i,k in enumerate(seq):
        c=conns[i%3]; t0=time.perf_counter()
        c.request("GET","/check",headers={"x-user":f"u{k}"}); r=c.getresponse(); r.read()
        lat.append(time.perf_counter()-t0)
    return time.time()-start, lat
for name,extra in [("per-replica",[]),("shared",["--shared-cache",f"redis://127.0.0.1:{rp}"])]:
    ms=fleet(extra)
    el,lat=drive(ms)
    calls=sum(metric(a,"mixer_handler_calls_total{",'variety="check"') for _,_,a in ms)
    hits=sum(metric(a,"mixer_check_cache_hits_total") for _,_,a in ms)
    sh=sum(metric(a,"mixer_check_cache_shared_hits_total") for _,_,a in ms)
    rt_sum=sum(metric(a,"mixer_check_cache_shared_round_trip_seconds_sum") for _,_,a in ms)
    rt_n=sum(metric(a,"mixer_check_cache_shared_round_trip_seconds_count") for _,_,a in ms)
    errs=sum(metric(a,"mixer_check_cache_shared_errors_total") for _,_,a in ms)
    lat.sort()
    print(f"{name}: requests={len(seq)} adapter_calls={calls:.0f} ({calls/el:.0f}/s) local_hits={hits:.0f} shared_hits={sh:.0f} hit_ratio={(hits+sh)/len(seq):.3f} errors={errs:.0f} shared_rt_mean_us={(rt_sum/rt_n*1e6 if rt_n else 0):.0f} req_p50_us={lat[len(lat)//2]*1e6:.0f} p99_us={lat[int(len(lat)*.99)]*1e6:.0f} elapsed={el:.1f}s")
    for p,_,_ in ms: p.kill(); p.wait()
redis.kill()
