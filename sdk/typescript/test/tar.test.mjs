// The tar writer and reader against GNU tar, and the reader's safety rules.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { packDir, extractTar, ArchiveError } from '../dist/index.js';
import { tmpdir, makeTree, walk, tarNames, tarEntry, tarOf } from './helpers.mjs';

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return Buffer.concat(chunks);
}

test('packDir: GNU tar lists and extracts what we pack (long names through PAX, symlinks, modes)', async () => {
  const src = tmpdir();
  const out = tmpdir();
  try {
    makeTree(src);
    const stats = { entries: 0, skipped: 0 };
    const archive = await collect(packDir(src, stats));
    assert.equal(archive.length % 512, 0);
    const want = Object.keys(walk(src));
    assert.equal(stats.entries, want.length);
    const names = tarNames(archive).map((l) => l.replace(/\/$/, ''));
    const expected = Object.entries(walk(src)).map(([n, d]) => (d.startsWith('link') ? `l ${n} ${d.replace('link ', '')}` : `${d.startsWith('dir') ? 'd' : '-'} ${n}`)).sort();
    assert.deepEqual(names, expected);
    execFileSync('tar', ['-xf', '-', '-C', out], { input: archive });
    assert.deepEqual(walk(out), walk(src));
  } finally {
    fs.rmSync(src, { recursive: true, force: true });
    fs.rmSync(out, { recursive: true, force: true });
  }
});

for (const format of ['pax', 'gnu', 'ustar']) {
  test(`extractTar: what GNU tar packs (--format=${format}) comes out the same`, async () => {
    const src = tmpdir();
    const out = tmpdir();
    try {
      makeTree(src);
      if (format === 'ustar') fs.rmSync(path.join(src, 'sub', 'n'.repeat(120)), { recursive: true });
      const archive = execFileSync('tar', [`--format=${format}`, '-C', src, '-cf', '-', '.']);
      const stats = await extractTar(Readable.from([archive]), out);
      assert.deepEqual(walk(out), walk(src));
      assert.equal(stats.bytes, archive.length);
      assert.equal(stats.entries, Object.keys(walk(src)).length);
    } finally {
      fs.rmSync(src, { recursive: true, force: true });
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
}

test('extractTar: byte-at-a-time chunks parse the same', async () => {
  const src = tmpdir();
  const out = tmpdir();
  try {
    fs.writeFileSync(path.join(src, 'f'), 'x'.repeat(1000));
    fs.mkdirSync(path.join(src, 'd'));
    const archive = await collect(packDir(src));
    async function* bytes() {
      for (let i = 0; i < archive.length; i++) yield archive.subarray(i, i + 1);
    }
    await extractTar(bytes(), out);
    assert.deepEqual(walk(out), walk(src));
  } finally {
    fs.rmSync(src, { recursive: true, force: true });
    fs.rmSync(out, { recursive: true, force: true });
  }
});

const hostile = [
  ['an absolute name', [tarEntry('/tmp/sbx-evil', { data: Buffer.from('x') })]],
  ['a .. name', [tarEntry('../evil', { data: Buffer.from('x') })]],
  ['a .. inside a name', [tarEntry('a/../../evil', { data: Buffer.from('x') })]],
  ['an absolute symlink', [tarEntry('l', { type: '2', linkname: '/etc' })]],
  ['a symlink climbing out', [tarEntry('d/l', { type: '2', linkname: '../../x' })]],
  ['an entry below an archive symlink', [tarEntry('sub/', { type: '5' }), tarEntry('l', { type: '2', linkname: 'sub' }), tarEntry('l/x', { data: Buffer.from('x') })]],
  ['a hard link outside', [tarEntry('h', { type: '1', linkname: '../outside' })]],
  ['a bad checksum', [Buffer.concat([Buffer.from('garbage'), Buffer.alloc(505)])]],
  ['a truncated entry', [tarEntry('f', { data: Buffer.alloc(2000) }).subarray(0, 1024)]],
];
for (const [what, entries] of hostile) {
  test(`extractTar refuses ${what}`, async () => {
    const base = tmpdir();
    const out = path.join(base, 'out');
    try {
      await assert.rejects(extractTar(Readable.from([what === 'a truncated entry' ? entries[0] : tarOf(...entries)]), out), ArchiveError);
      assert.ok(!fs.existsSync(path.join(base, 'evil')) && !fs.existsSync('/tmp/sbx-evil'));
      assert.ok(!fs.existsSync(path.join(out, 'sub', 'x')), 'nothing written through the symlink');
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });
}

test('extractTar: an existing symlink is replaced, never written through; none is followed to a parent', async () => {
  const base = tmpdir();
  const out = path.join(base, 'out');
  try {
    fs.mkdirSync(out);
    fs.writeFileSync(path.join(base, 'victim'), 'keep');
    fs.symlinkSync('../victim', path.join(out, 'f'));
    fs.symlinkSync(base, path.join(out, 'pre'));
    await extractTar(Readable.from([tarOf(tarEntry('f', { data: Buffer.from('new') }))]), out);
    assert.equal(fs.readFileSync(path.join(base, 'victim'), 'utf8'), 'keep');
    assert.equal(fs.lstatSync(path.join(out, 'f')).isFile(), true);
    assert.equal(fs.readFileSync(path.join(out, 'f'), 'utf8'), 'new');
    await assert.rejects(extractTar(Readable.from([tarOf(tarEntry('pre/victim', { data: Buffer.from('evil') }))]), out), ArchiveError);
    assert.equal(fs.readFileSync(path.join(base, 'victim'), 'utf8'), 'keep');
    // A hard link inside is fine; set-id bits are dropped.
    await extractTar(Readable.from([tarOf(tarEntry('g', { data: Buffer.from('g'), mode: 0o4755 }), tarEntry('h', { type: '1', linkname: 'g' }))]), out);
    assert.equal(fs.readFileSync(path.join(out, 'h'), 'utf8'), 'g');
    assert.equal(fs.statSync(path.join(out, 'g')).mode & 0o7777, 0o755);
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
});
