"""Reads the sandbox with clients other people wrote, and summarizes what it got as one JSON line.

  read.py fetch URL USER PASSWORD ACCEPT   -- Python requests + HTTPDigestAuth (MD5, qop=auth)
  read.py parse json|xml < body            -- parse a body another client (curl) fetched

Summary: {"status", "content_type", "content_encoding", "format", "type", "id", "ids", "links"}
where type is the JSON resource_type (or "collection" without one) or the XML root element,
ids are the ids of a collection's entries, and links the rels the resource links to.
"""
import json
import sys
import xml.etree.ElementTree as ET


def summarize_json(text):
    doc = json.loads(text)
    out = {"format": "json", "type": doc.get("resource_type", "collection" if "entries" in doc else None)}
    if isinstance(doc.get("entries"), list):
        out["ids"] = [e["id"] for e in doc["entries"]]
    if "id" in doc:
        out["id"] = doc["id"]
    out["links"] = sorted(k[: -len("_link")] for k in doc if k.endswith("_link"))
    return out


def summarize_xml(data):
    root = ET.fromstring(data)
    out = {"format": "xml", "type": root.tag}
    if root.get("type") == "array":
        out["ids"] = [int(child.findtext("id")) for child in root if child.tag != "link" and child.find("id") is not None]
    id_el = root.find("id")
    if id_el is not None:
        out["id"] = int(id_el.text)
    out["links"] = sorted(link.get("rel") for link in root.findall("link"))
    return out


def summarize(fmt, body):
    return summarize_json(body.decode("utf-8-sig")) if fmt == "json" else summarize_xml(body)


def main():
    if sys.argv[1] == "parse":
        print(json.dumps(summarize(sys.argv[2], sys.stdin.buffer.read())))
        return
    import requests
    from requests.auth import HTTPDigestAuth

    _, _, url, user, password, accept = sys.argv
    res = requests.get(url, auth=HTTPDigestAuth(user, password), headers={"Accept": accept}, timeout=10)
    out = {
        "status": res.status_code,
        "content_type": res.headers.get("content-type"),
        "content_encoding": res.headers.get("content-encoding"),
    }
    if res.status_code == 200:
        out.update(summarize("json" if "json" in accept else "xml", res.content))
    print(json.dumps(out))


main()
