#!/usr/bin/env python3
"""Independent check of imagegen's attestations, sharing no code with imagegen.

For every pushed image the manifest (imagegen-manifest.json) records, it asks the registry
(plain HTTP, the local test registry) which digest the tag serves, reads cosign's
`sha256-<hex>.att` and `.sig` manifests for that digest, and checks:
  - each DSSE envelope's signature with securesystemslib (ECDSA P-256, key id computed here as
    the sha256 of the public key's DER SubjectPublicKeyInfo), and the image signature (`.sig`)
    with cryptography;
  - each statement is in-toto Statement v1 whose subject is the digest the registry serves;
  - the provenance, SBOM and gpu-selftest statements are all there;
  - the SBOM with cyclonedx-python-lib's strict JSON validator for CycloneDX 1.6;
  - the gpu-selftest predicate with jsonschema against imagegen's published schema;
  - the same attestations and signature as OCI 1.1 referrers: listed by the referrers API or,
    where the registry has none, by the fallback index tagged `sha256-<hex>`, each a manifest whose
    `subject` is the served digest, holding the very layers of the `.att` / `.sig` manifests;
  - for an OCI image index (the manifest's `indexes`): the same, and its gpu-selftest statement
    names exactly the platform digests the served index lists, reading `pass` only when every
    platform's predicate does.
Exit 0 when every image passes, 1 naming each problem (or when the manifest records none).

usage: verify-attestations.py --manifest M --key PUB.pem --schema SCHEMA.json
"""

import argparse
import base64
import hashlib
import json
import sys
import urllib.error
import urllib.request

import jsonschema
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

PROVENANCE = "https://slsa.dev/provenance/v1"
SBOM = "https://cyclonedx.org/bom"
SELFTEST = "urn:imagegen:predicate:gpu-selftest-result:v1"
ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])


def get(url, accept=None):
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.read()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def split(repository):
    host, _, path = repository.partition("/")
    return host, path


def check_image(repository, tag, key, public_key, schema):
    host, path = split(repository)
    base = f"http://{host}/v2/{path}"
    body = get(f"{base}/manifests/{tag}", ACCEPT)
    if body is None:
        return [f"the registry has no {repository}:{tag}"]
    served = "sha256:" + hashlib.sha256(body).hexdigest()
    hex_digest = served.split(":", 1)[1]
    problems = []

    att = get(f"{base}/manifests/sha256-{hex_digest}.att", ACCEPT)
    found = set()
    if att is None:
        problems.append(f"no attestations (no tag sha256-{hex_digest}.att)")
    else:
        for layer in json.loads(att)["layers"]:
            blob = get(f"{base}/blobs/{layer['digest']}")
            if blob is None or "sha256:" + hashlib.sha256(blob).hexdigest() != layer["digest"]:
                problems.append(f"layer {layer['digest']} missing or not matching its digest")
                continue
            name = layer.get("annotations", {}).get("predicateType", layer["digest"])
            try:
                envelope = Envelope.from_dict(json.loads(blob))
                envelope.verify([key], 1)
            except Exception as error:  # securesystemslib raises several kinds
                problems.append(f"{name}: signature does not verify: {type(error).__name__}: {error}")
                continue
            statement = json.loads(envelope.payload)
            if statement.get("_type") != "https://in-toto.io/Statement/v1":
                problems.append(f"{name}: not an in-toto Statement v1")
                continue
            subjects = [s.get("digest", {}).get("sha256") for s in statement.get("subject", [])]
            if hex_digest not in subjects:
                problems.append(f"{name}: subject {subjects} is not the served digest {served}")
                continue
            kind = statement.get("predicateType")
            predicate = statement.get("predicate")
            if kind == SBOM:
                errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(predicate))
                if errors is not None:
                    problems.append(f"SBOM is not valid CycloneDX 1.6: {errors}")
                    continue
            if kind == SELFTEST:
                try:
                    jsonschema.Draft202012Validator(schema).validate(predicate)
                except jsonschema.ValidationError as error:
                    problems.append(f"gpu-selftest predicate breaks its schema: {error.message}")
                    continue
                served_manifest = json.loads(body)
                if "manifests" in served_manifest:
                    problems.extend(index_selftest_problems(served_manifest, predicate))
            found.add(kind)
        for kind in (PROVENANCE, SBOM, SELFTEST):
            if kind not in found and not any(p.startswith(kind) for p in problems):
                problems.append(f"missing statement {kind}")

    problems.extend(referrer_problems(base, served, hex_digest, att))
    sig = get(f"{base}/manifests/sha256-{hex_digest}.sig", ACCEPT)
    if sig is None:
        problems.append(f"no signature (no tag sha256-{hex_digest}.sig)")
    else:
        verified = False
        for layer in json.loads(sig)["layers"]:
            payload = get(f"{base}/blobs/{layer['digest']}") or b""
            signature = base64.b64decode(layer.get("annotations", {}).get("dev.cosignproject.cosign/signature", ""))
            try:
                public_key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
            except (InvalidSignature, ValueError):
                continue
            named = json.loads(payload)["critical"]["image"]["docker-manifest-digest"]
            verified = verified or named == served
        if not verified:
            problems.append("the image signature (.sig) does not verify for the served digest")
    return problems


REFERRER_TYPES = {
    "application/vnd.in-toto+json": "att",
    "application/vnd.dev.cosign.simplesigning.v1+json": "sig",
}


def referrer_problems(base, served, hex_digest, att):
    """The OCI 1.1 referrers of `served`: one of each type, about `served`, with the cosign layers."""
    listing = get(f"{base}/referrers/{served}", "application/vnd.oci.image.index.v1+json")
    if listing is None:
        listing = get(f"{base}/manifests/sha256-{hex_digest}", ACCEPT)
    if listing is None:
        return [f"no OCI referrers (no referrers API answer, no tag sha256-{hex_digest})"]
    problems = []
    entries = json.loads(listing).get("manifests", [])
    for artifact_type, suffix in REFERRER_TYPES.items():
        found = [e for e in entries if e.get("artifactType") == artifact_type]
        if not found:
            problems.append(f"referrers: none of type {artifact_type}")
            continue
        body = get(f"{base}/manifests/{found[-1]['digest']}", ACCEPT)
        if body is None or "sha256:" + hashlib.sha256(body).hexdigest() != found[-1]["digest"]:
            problems.append(f"referrers: {found[-1]['digest']} missing or not matching its digest")
            continue
        manifest = json.loads(body)
        if manifest.get("subject", {}).get("digest") != served:
            problems.append(f"referrers: {artifact_type} is about {manifest.get('subject')}, not {served}")
            continue
        cosign = att if suffix == "att" else get(f"{base}/manifests/sha256-{hex_digest}.sig", ACCEPT)
        if cosign is not None:
            want = sorted(layer["digest"] for layer in json.loads(cosign)["layers"])
            have = sorted(layer["digest"] for layer in manifest.get("layers", []))
            if want != have:
                problems.append(f"referrers: {artifact_type} holds other layers than the .{suffix} tag")
    return problems


def index_selftest_problems(index, predicate):
    """An index's gpu-selftest predicate against the platform images the index lists."""
    listed = {
        f"{entry['platform']['os']}/{entry['platform']['architecture']}": entry["digest"]
        for entry in index["manifests"]
    }
    platforms = predicate.get("platforms") or {}
    named = {platform: entry["digest"] for platform, entry in platforms.items()}
    if named != listed:
        return [f"gpu-selftest: the index lists {listed}, the statement names {named}"]
    every_pass = all(entry["predicate"]["result"] == "pass" for entry in platforms.values())
    if (predicate["result"] == "pass") != every_pass:
        return [f"gpu-selftest: the index reads {predicate['result']!r} but its platforms read "
                f"{ {p: e['predicate']['result'] for p, e in platforms.items()} }"]
    return []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--schema", required=True)
    args = parser.parse_args()
    with open(args.key, "rb") as file:
        public_key = serialization.load_pem_public_key(file.read())
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    key = SSlibKey.from_crypto(public_key, keyid=hashlib.sha256(der).hexdigest(), scheme="ecdsa-sha2-nistp256")
    with open(args.schema) as file:
        schema = json.load(file)
    with open(args.manifest) as file:
        manifest = json.load(file)
    checked, bad = 0, 0
    records = [r for r in manifest.get("images", {}).values() if r.get("digest")]
    records += list(manifest.get("indexes", {}).values())
    for record in records:
        checked += 1
        image = f"{record['repository']}:{record['tag']}"
        problems = check_image(record["repository"], record["tag"], key, public_key, schema)
        if problems:
            bad += 1
            for problem in problems:
                print(f"BAD {image}: {problem}")
        else:
            print(f"ok {image}")
    print(f"{checked} image(s) checked, {bad} bad")
    return 0 if checked and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
