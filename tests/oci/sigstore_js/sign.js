// Signs with the Sigstore JavaScript stack against its own mock services:
// `@sigstore/mock`'s Fulcio CA (with its CT log) and Rekor log, reached by
// `@sigstore/sign`'s FulcioSigner and RekorWitness through nock (the mock
// intercepts node's HTTP client; nothing leaves the process).
//
//   node sign.js OUT_DIR MANIFEST_FILE SUBJECT ISSUER
//
// Writes OUT_DIR/message.json (a message signature over the manifest's
// bytes), OUT_DIR/dsse.json (a DSSE in-toto statement naming the manifest's
// digest), both logged in the form Rekor stores (see asRekorStores);
// OUT_DIR/dsse-mock-body.json, the DSSE bundle logged by the mock as it is
// (its log entry's body is the proposal); and OUT_DIR/trusted_root.json
// (the mock's CA, CT log and Rekor log).
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const nock = require('nock');
const mock = require('@sigstore/mock');
const sign = require('@sigstore/sign');
const { bundleToJSON } = require('@sigstore/bundle');

const FULCIO = 'https://fulcio.sigstore.mock';
const REKOR = 'https://rekor.sigstore.mock';
const REKOR_MOCK_BODY = 'https://rekor-mock-body.sigstore.mock';

const sha256 = (bytes) => crypto.createHash('sha256').update(bytes).digest('hex');
const b64pem = (b64) => Buffer.from(new crypto.X509Certificate(Buffer.from(b64, 'base64')).toString()).toString('base64');

// The mock log stores the entry as proposed; Rekor stores its canonical
// form: a hashedrekord's certificate re-encoded as PEM (64 columns), a
// DSSE proposal turned into the payload's and envelope's hashes and each
// signature with its verifier. This wraps the mock log to store that.
function asRekorStores(tlog) {
  return {
    log: (proposed) => {
      if (proposed.kind === 'hashedrekord') {
        const key = proposed.spec.signature.publicKey;
        key.content = b64pem(key.content);
      } else if (proposed.kind === 'dsse') {
        const { envelope, verifiers } = proposed.spec.proposedContent;
        const env = JSON.parse(envelope);
        proposed = {
          apiVersion: proposed.apiVersion,
          kind: 'dsse',
          spec: {
            envelopeHash: { algorithm: 'sha256', value: sha256(envelope) },
            payloadHash: { algorithm: 'sha256', value: sha256(Buffer.from(env.payload, 'base64')) },
            signatures: env.signatures.map((s, i) => ({ signature: s.sig, verifier: b64pem(verifiers[i]) })),
          },
        };
      }
      return tlog.log(proposed);
    },
  };
}

function intercept(base, handler) {
  nock(base)
    .persist()
    .post(handler.path)
    .reply(async (_uri, body) => {
      const req = typeof body === 'string' ? body : JSON.stringify(body);
      const { statusCode, response, contentType } = await handler.fn(req);
      return [statusCode, response, { 'Content-Type': contentType || 'text/plain' }];
    });
}

function b64url(value) {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

async function main() {
  const [out, manifestFile, subject, issuer] = process.argv.slice(2);
  const manifest = fs.readFileSync(manifestFile);
  const digest = crypto.createHash('sha256').update(manifest).digest('hex');
  const key = () => crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });

  const ctlog = await mock.initializeCTLog(key());
  const ca = await mock.initializeCA(key(), ctlog);
  const tlog = await mock.initializeTLog(REKOR, key());
  intercept(FULCIO, mock.fulcioHandler(ca));
  intercept(REKOR, mock.rekorHandler(asRekorStores(tlog)));
  intercept(REKOR_MOCK_BODY, mock.rekorHandler(tlog));
  nock.disableNetConnect();

  // An OIDC token as the CI's provider hands it out; the mock reads its
  // claims (`sub`, `iss`) without checking a signature.
  const now = Math.floor(Date.now() / 1000);
  const token = [
    b64url({ alg: 'none', typ: 'JWT' }),
    b64url({ iss: issuer, sub: subject, aud: 'sigstore', iat: now, exp: now + 600 }),
    'x',
  ].join('.');
  const witnesses = [new sign.RekorWitness({ rekorBaseURL: REKOR })];
  const mockBody = [new sign.RekorWitness({ rekorBaseURL: REKOR_MOCK_BODY })];
  const signer = () =>
    new sign.FulcioSigner({ fulcioBaseURL: FULCIO, identityProvider: { getToken: async () => token } });

  const message = await new sign.MessageSignatureBundleBuilder({ signer: signer(), witnesses }).create({
    data: manifest,
  });
  const statement = JSON.stringify({
    _type: 'https://in-toto.io/Statement/v1',
    subject: [{ name: 'plugin', digest: { sha256: digest } }],
    predicateType: 'https://sigstore.dev/cosign/sign/v1',
    predicate: {},
  });
  const artifact = { data: Buffer.from(statement), type: 'application/vnd.in-toto+json' };
  const dsse = await new sign.DSSEBundleBuilder({ signer: signer(), witnesses }).create(artifact);
  const dsseMockBody = await new sign.DSSEBundleBuilder({ signer: signer(), witnesses: mockBody }).create(artifact);

  const start = '2020-01-01T00:00:00Z';
  const spkiLog = (baseUrl, spki, keyId) => ({
    baseUrl,
    hashAlgorithm: 'SHA2_256',
    publicKey: { rawBytes: spki.toString('base64'), keyDetails: 'PKIX_ECDSA_P256_SHA_256', validFor: { start } },
    logId: { keyId: keyId.toString('base64') },
  });
  const root = {
    mediaType: 'application/vnd.dev.sigstore.trustedroot+json;version=0.1',
    tlogs: [spkiLog(REKOR, tlog.publicKey, crypto.createHash('sha256').update(tlog.publicKey).digest())],
    certificateAuthorities: [
      {
        subject: { organization: 'sigstore.mock', commonName: 'sigstore' },
        uri: FULCIO,
        certChain: { certificates: [{ rawBytes: ca.rootCertificate.toString('base64') }] },
        validFor: { start },
      },
    ],
    ctlogs: [spkiLog('https://ctfe.sigstore.mock', ctlog.publicKey, Buffer.from(ctlog.logID))],
    timestampAuthorities: [],
  };
  const write = (name, value) => fs.writeFileSync(path.join(out, name), JSON.stringify(value, null, 2) + '\n');
  write('message.json', bundleToJSON(message));
  write('dsse.json', bundleToJSON(dsse));
  write('dsse-mock-body.json', bundleToJSON(dsseMockBody));
  write('trusted_root.json', root);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
