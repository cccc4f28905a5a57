//! The skills extension's methods (SEP-2640), both eras: `skills/list`, `skills/get`,
//! `resources/directory/read`, and the `skill://` files `resources/read` and
//! `resources/list` serve beside the registered resources.

use std::sync::Arc;

use serde_json::{Value, json};

use super::paging::page_value;
use super::{McpServer, to_value};
use crate::auth::Principal;
use crate::handler::{SkillsDirectory, SkillsError};
use crate::protocol::methods::{
    GetSkillParams, GetSkillResult, Method, ReadDirectoryParams, ResourceContents,
    ResourceDefinition, SKILL_SCHEME, SKILLS_EXTENSION,
};
use crate::protocol::{ErrorObject, Request};

impl McpServer {
    /// Serves `skills` (the skills extension, declared in the capabilities with
    /// `directoryRead`): `skills/list`, `skills/get`, `resources/directory/read`, each
    /// file through `resources/read` and each `SKILL.md` in `resources/list`. Declares
    /// the `resources` capability too.
    pub fn with_skills(mut self, skills: SkillsDirectory) -> Self {
        self.skills = Some(Arc::new(skills));
        self
    }

    /// The extension's entry under `capabilities.extensions`, when skills are served.
    pub(super) fn skills_extension(&self) -> Option<(&'static str, Value)> {
        self.skills
            .as_ref()
            .map(|_| (SKILLS_EXTENSION, json!({ "directoryRead": true })))
    }

    /// Answers `skills/list`, `skills/get` or `resources/directory/read`; -32601 when no
    /// skills are served, -32602 for a URI that names no skill or directory.
    pub(super) fn skills_method(&self, request: Request) -> Result<Value, ErrorObject> {
        let Some(skills) = &self.skills else {
            return Err(ErrorObject::method_not_found(&request.method));
        };
        match request.kind {
            Method::SkillsList => page_value("skills", &skills.list(), &request),
            Method::SkillsGet => {
                let params: GetSkillParams = request.into_params()?;
                let skill = skills.get(&params.uri).map_err(invalid)?;
                to_value(&GetSkillResult { skill })
            }
            _ => {
                let params: ReadDirectoryParams = request.params_as()?;
                let children = skills.read_directory(&params.uri).map_err(invalid)?;
                page_value("resources", &children, &request)
            }
        }
    }

    /// The resources `resources/list` shows `caller`: the registered ones, then each
    /// skill's `SKILL.md`.
    pub(super) fn listed_resources(&self, caller: Option<&Principal>) -> Vec<ResourceDefinition> {
        let mut resources = self.resources.get().list_for(caller);
        if let Some(skills) = &self.skills {
            resources.extend(skills.manifests());
        }
        resources
    }

    /// The contents of skill file `uri`, when it is one.
    pub(super) fn read_skill_file(&self, uri: &str) -> Option<ResourceContents> {
        let skills = self.skills.as_ref().filter(|_| uri.starts_with(SKILL_SCHEME))?;
        skills.read_file(uri).ok()
    }
}

fn invalid(error: SkillsError) -> ErrorObject {
    ErrorObject::invalid_params(format!("Invalid params: {error}"))
}
