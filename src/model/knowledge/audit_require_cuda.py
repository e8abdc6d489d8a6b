# Compares NVIDIA_REQUIRE_CUDA of every base-amd64/base-arm64 stage of NVIDIA's base Dockerfiles
# (dist/<ver>/ubuntu<XXYY>/base/Dockerfile of the gitlab mirror) with what knowledge.yaml generates.
# Usage: python3 audit_require_cuda.py knowledge.yaml  (the mirror path is REPO below).
import yaml, subprocess, re, sys
K = yaml.safe_load(open(sys.argv[1]))
REPO = "/work/.mirror/pranavmishra90+nvidia-container-images-cuda/repo"
files = subprocess.run(["git", "-C", REPO, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True).stdout.split()
brands = {k: v["names"] for k, v in K["brands"].items()}
def gen(rel, plat):
    mm = ".".join(rel["version"].split(".")[:2])
    s = f"cuda>={mm}"
    if rel.get("brands"):
        for br in rel.get("platforms", {}).get(plat, []):
            for b in brands[rel["brands"]]:
                s += f" brand={b},driver>={br},driver<{br+1}"
    return s
def stages(text):
    out = {}; cur = None
    for line in text.splitlines():
        m = re.match(r"FROM base [aA][sS] base-(amd64|arm64)", line)
        if m: cur = {"amd64": "linux/amd64", "arm64": "linux/arm64"}[m.group(1)]; out[cur] = None; continue
        if line.startswith("FROM "): cur = None
        m = re.match(r'ENV NVIDIA_REQUIRE_CUDA[ =]"?(.*?)"?$', line)
        if m and cur: out[cur] = m.group(1)
    return out
equal = differ = 0
for rel in K["cuda"]:
    for u in rel.get("ubuntu", []):
        osd = "ubuntu" + u.replace(".", "")
        cands = [f for f in files if re.fullmatch(rf"dist/(end-of-life/)?{re.escape(rel['version'])}/{osd}/base/Dockerfile", f)]
        if not cands: print(f"{rel['version']} {osd}: no Dockerfile in the mirror"); continue
        text = subprocess.run(["git", "-C", REPO, "show", "HEAD:" + cands[0]], capture_output=True, text=True).stdout
        st = stages(text)
        for plat in sorted(set(st) | set(rel.get("platforms", {}))):
            nv = st.get(plat, "<no stage>") if plat in st else "<no stage>"
            if plat in st and st[plat] is None: nv = "<stage without NVIDIA_REQUIRE_CUDA>"
            ours = gen(rel, plat) if plat in rel.get("platforms", {}) else "<no platform>"
            if nv == ours: equal += 1
            else:
                differ += 1
                print(f"DIFF {rel['version']} {osd} {plat}: nvidia={nv[:110]!r} ours={ours[:110]!r}")
print(f"equal={equal} differ={differ}")
