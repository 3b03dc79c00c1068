"""The SPDX 2.3 SBOM of a release's image (release/release.sh).

    sbom.py --version V --created TIME --subject REGISTRY/REPO@DIGEST
            --crates PLATFORM=FILE ... --packages PLATFORM=FILE ...

--crates files are `cargo tree -e normal --prefix none --format '{p}|{l}|{r}'` of the
manager for each platform: the Rust crates linked into its binary. --packages files are
image/build.sh's `--packages` lists: the Debian packages whose files the image holds (the
C library, libgcc, CA certificates). The document describes the image index, CONTAINS every
crate (once, whatever platforms share it) and every package (per architecture), each with its
package URL, its declared licence and where it comes from. The same inputs give the same
bytes: keys and packages in a fixed order, the time given.
"""

import argparse
import json
import re
import sys
from urllib.parse import quote


def fail(message):
    print(f"sbom.py: {message}", file=sys.stderr)
    sys.exit(1)


def spdx_id(*parts):
    return "SPDXRef-" + "-".join(re.sub(r"[^A-Za-z0-9.]+", ".", part) for part in parts)


def license_expression(text):
    """Cargo's licence field as an SPDX expression: the old `MIT/Apache-2.0` is `OR`."""
    text = text.strip()
    if not text:
        return "NOASSERTION"
    text = re.sub(r"\s*/\s*", " OR ", text)
    if not re.fullmatch(r"[A-Za-z0-9.+\-() ]+", text):
        return "NOASSERTION"
    return text


def crates(paths):
    found = {}
    for path in paths:
        for line in open(path):
            line = line.rstrip("\n").removesuffix(" (*)")
            if not line:
                continue
            package, _, rest = line.partition("|")
            licence, _, repository = rest.partition("|")
            match = re.fullmatch(r"(\S+) v(\S+)( \((.*)\))?", package)
            if not match:
                fail(f"{path}: `{line}` is not NAME vVERSION[ (PATH)]|LICENSE|REPOSITORY")
            name, version, local = match.group(1), match.group(2), match.group(4)
            found[(name, version)] = (licence, repository, local)
    for (name, version), (licence, repository, local) in sorted(found.items()):
        package = {
            "SPDXID": spdx_id("Crate", name, version),
            "name": name,
            "versionInfo": version,
            "downloadLocation": (
                "NOASSERTION"
                if local
                else f"https://crates.io/api/v1/crates/{name}/{version}/download"
            ),
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": license_expression(licence),
            "copyrightText": "NOASSERTION",
            "externalRefs": [
                {
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": f"pkg:cargo/{name}@{version}",
                }
            ],
        }
        if repository:
            package["homepage"] = repository
        yield package


def distro():
    """This machine's Debian release as package URLs name it: debian-12."""
    fields = {}
    with open("/etc/os-release") as release:
        for line in release:
            key, _, value = line.strip().partition("=")
            fields[key] = value.strip('"')
    return f"{fields.get('ID', 'debian')}-{fields.get('VERSION_ID', '')}".rstrip("-")


def debian_packages(paths):
    found = set()
    for path in paths:
        for line in open(path):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 3:
                fail(f"{path}: `{line.strip()}` is not NAME VERSION ARCHITECTURE")
            found.add(tuple(fields))
    release = distro()
    for name, version, architecture in sorted(found):
        yield {
            "SPDXID": spdx_id("Deb", name, version, architecture),
            "name": name,
            "versionInfo": version,
            "supplier": "Organization: Debian",
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "comment": f"/usr/share/doc/{name}/copyright in the image has its licence.",
            "externalRefs": [
                {
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": f"pkg:deb/debian/{name}@{quote(version, safe='')}"
                    f"?arch={architecture}&distro={release}",
                }
            ],
        }


def files_of(values, flag):
    paths = []
    for value in values:
        platform, _, path = value.partition("=")
        if not path:
            fail(f"{flag} {value}: PLATFORM=FILE")
        paths.append(path)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--created", required=True)
    parser.add_argument("--subject", required=True)
    parser.add_argument("--crates", action="append", default=[])
    parser.add_argument("--packages", action="append", default=[])
    args = parser.parse_args()
    repository, _, digest = args.subject.partition("@")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        fail(f"--subject {args.subject}: REGISTRY/REPO@sha256:DIGEST")

    image_id = "SPDXRef-Image"
    image = {
        "SPDXID": image_id,
        "name": "wasm-ccm",
        "versionInfo": args.version,
        "primaryPackagePurpose": "CONTAINER",
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "Apache-2.0",
        "copyrightText": "NOASSERTION",
        "externalRefs": [
            {
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:oci/wasm-ccm@{quote(digest, safe='')}"
                f"?repository_url={quote(repository, safe='/')}&tag={args.version}",
            }
        ],
    }
    contents = list(crates(files_of(args.crates, "--crates")))
    contents += list(debian_packages(files_of(args.packages, "--packages")))
    if not contents:
        fail("no crates and no packages: give --crates and --packages")
    document = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"wasm-ccm-{args.version}",
        "documentNamespace": f"https://spdx.org/spdxdocs/wasm-ccm-{args.version}-{digest[7:]}",
        "creationInfo": {
            "created": args.created,
            "creators": ["Tool: wasm-ccm-release/sbom.py"],
        },
        "documentDescribes": [image_id],
        "packages": [image] + contents,
        "relationships": [
            {
                "spdxElementId": image_id,
                "relationshipType": "CONTAINS",
                "relatedSpdxElement": package["SPDXID"],
            }
            for package in contents
        ],
    }
    json.dump(document, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
