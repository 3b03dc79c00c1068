// Build a TypeScript provider into a wasm component: a project's `npm run build` (made by
// `wasm-ccm provider new --language typescript`, with this script in `wasm-ccm-sdk/`), and
// wasm-ccm's tests/guest-builds/build.rs for every test run:
//
//   node build.mjs <node_modules> <wit file> <guest dir> <work dir> <out.wasm>
//
// 1. the contract's types, generated from the WIT by jco's type generator (jco 1.35.0's
//    `guest-types` command cannot read any WIT path, "os error 44", so its generator is called
//    with the WIT's text instead of its path: the same code and output),
// 2. `tsc --noEmit` over the guest, this SDK and those types (strict),
// 3. esbuild bundles `<guest dir>/src/index.ts` and the SDK into one ES module, leaving the
//    contract's `wasm-ccm:` imports to componentize-js,
// 4. componentize-js makes it a component of the `cloud-provider-node-sets` world (the
//    contract's, with load-balancer nodes lent as node sets, as the Rust SDK builds).
//
// Every failure exits non-zero with the step that failed; success prints the component's
// path, size and digest.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const WORLD = 'cloud-provider-node-sets';

const [modules, wit, guest, work, out] = process.argv.slice(2).map((arg) => resolve(arg));
if (!out) {
  console.error('usage: node build.mjs <node_modules> <wit file> <guest dir> <work dir> <out.wasm>');
  process.exit(2);
}
const sdk = dirname(fileURLToPath(import.meta.url));
const load = (path) => import(pathToFileURL(join(modules, path)).href);

async function step(name, run) {
  try {
    return await run();
  } catch (error) {
    console.error(`building ${guest}: ${name} failed: ${error?.message ?? error}`);
    process.exit(1);
  }
}

rmSync(work, { recursive: true, force: true });
const types = join(work, 'types');

await step('generating types from the WIT', async () => {
  const bindgen = await load('@bytecodealliance/jco-transpile/vendor/js-component-bindgen-component.js');
  await bindgen.$init;
  const files = bindgen.generateTypes('provider', {
    wit: { tag: 'source', val: readFileSync(wit, 'utf8') },
    world: WORLD,
    guest: true,
    tlaCompat: false,
    features: { tag: 'list', val: [] },
  });
  for (const [name, contents] of files) {
    mkdirSync(dirname(join(types, name)), { recursive: true });
    writeFileSync(join(types, name), contents);
  }
});

const tsconfig = join(work, 'tsconfig.json');
writeFileSync(
  tsconfig,
  JSON.stringify({
    compilerOptions: {
      target: 'es2022',
      module: 'es2022',
      moduleResolution: 'bundler',
      // esnext.disposable: the node-set resource's generated class is `Disposable`.
      lib: ['es2022', 'dom', 'esnext.disposable'],
      strict: true,
      noEmit: true,
      noUnusedLocals: true,
      noUnusedParameters: true,
      skipLibCheck: false,
      types: [],
      paths: { '@wasm-ccm/provider-sdk': [join(sdk, 'src', 'index.ts')] },
    },
    include: [join(guest, 'src'), join(sdk, 'src'), types],
  }),
);
await step('type checking (tsc)', () =>
  execFileSync(process.execPath, [join(modules, 'typescript', 'bin', 'tsc'), '-p', tsconfig], {
    stdio: 'inherit',
  }),
);

const bundle = join(work, 'provider.js');
await step('bundling (esbuild)', async () => {
  const esbuild = await load('esbuild/lib/main.js');
  await esbuild.build({
    entryPoints: [join(guest, 'src', 'index.ts')],
    bundle: true,
    format: 'esm',
    target: 'es2022',
    platform: 'neutral',
    outfile: bundle,
    external: ['wasm-ccm:*'],
    alias: { '@wasm-ccm/provider-sdk': join(sdk, 'src', 'index.ts') },
    logLevel: 'warning',
  });
});

await step('componentize-js', async () => {
  const { componentize } = await load('@bytecodealliance/componentize-js/src/componentize.js');
  const { component } = await componentize({
    sourcePath: bundle,
    witPath: wit,
    worldName: WORLD,
    // Provider calls need none of these; `http` (fetch over wasi:http) and `clocks` stay.
    disableFeatures: ['fetch-event'],
  });
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(`${out}.partial`, component);
  renameSync(`${out}.partial`, out);
});

const component = readFileSync(out);
const digest = createHash('sha256').update(component).digest('hex');
console.log(`built ${relative(process.cwd(), out)} (${component.length} bytes, sha256:${digest})`);
