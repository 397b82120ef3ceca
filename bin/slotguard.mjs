#!/usr/bin/env node
// The operator CLI's entry point (`npx slotguard`): registers tsx so Node loads the TypeScript
// sources as they are, then runs cli/slotguard.ts with the process's streams.
import { register } from 'tsx/esm/api';

// Lambda runs Node 22; on a Node 20 operator machine the SDK's upgrade notice would bury the output.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
register();
const { main } = await import('../cli/slotguard.ts');
process.exitCode = await main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr });
