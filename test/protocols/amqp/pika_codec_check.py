"""Reads the AMQP codec's golden fixtures (JSON on stdin) with pika's codec (python3-pika, a second client
implementation besides amqplib): each frame must decode to the fixture's values and re-encode to the same bytes.
Prints one JSON object: {"ok": n, "missing": [...], "errors": [...]}. Used by codec-pika.test.ts."""
import json
import re
import sys

from pika import frame, spec

ARG = {'no_wait': 'nowait', 'global': 'global_qos'}


def snake(k):
    s = re.sub(r'([A-Z])', lambda m: '_' + m.group(1).lower(), k)
    return ARG.get(s, s)


def value(v):
    return bytes.fromhex(v['buf']) if isinstance(v, dict) and set(v) == {'buf'} else v


def main():
    d = json.load(sys.stdin)
    ok, missing, errors = 0, [], []
    for f in d['methods']:
        raw = bytes.fromhex(f['hex'])
        name = f['method']['name']
        if int(f['hex'][14:22], 16) not in spec.methods:
            missing.append(name)
            continue
        n, fr = frame.decode_frame(raw)
        if n != len(raw):
            errors.append('%s: pika read %d of %d bytes' % (name, n, len(raw)))
            continue
        for k, v in f['method'].items():
            if k == 'name':
                continue
            got, want = getattr(fr.method, snake(k)), value(v)
            if isinstance(got, bytes) and isinstance(want, str):
                got = got.decode('utf8')
            if got != want:
                errors.append('%s.%s: pika %r, fixture %r' % (name, k, got, want))
        out = frame.Method(f['channel'], fr.method).marshal()
        if out != raw:
            errors.append('%s: pika encodes %s' % (name, out.hex()))
        else:
            ok += 1
    p = d['props']
    raw = bytes.fromhex(p['hex'])
    n, fr = frame.decode_frame(raw)
    if fr.body_size != p['bodySize']:
        errors.append('properties: body size %r' % fr.body_size)
    for k, v in p['properties'].items():
        got = getattr(fr.properties, snake(k))
        if got != v:
            errors.append('properties.%s: pika %r, fixture %r' % (k, got, v))
    out = frame.Header(p['channel'], p['bodySize'], fr.properties).marshal()
    if out != raw:
        errors.append('properties: pika encodes %s' % out.hex())
    print(json.dumps({'ok': ok, 'missing': missing, 'errors': errors}))


main()
