// Writes docs/openapi.json (run by `npm run build`): the document GET /api/v2/openapi.json
// serves, generated from the control plane's own routers (control-plane/resources.ts), built
// here over inert dependencies: registering a route reads none of them, and nothing is started.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openApiDocumentOfControlPlane } from '../control-plane/openapi/openapi-build.js';
import { packageRoot } from '../lib/paths.js';

const file = join(packageRoot, 'docs', 'openapi.json');
writeFileSync(file, `${JSON.stringify(openApiDocumentOfControlPlane(), null, 2)}\n`);
